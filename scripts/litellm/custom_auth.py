"""Custom auth hook for the helmbench LiteLLM test proxy.

Accepts exactly one key, ``sk-test-good``; any other (or none) is rejected.
LiteLLM turns any plain exception raised here into a 401 ProxyException
(litellm/proxy/auth/auth_exception_handler.py::_as_proxy_exception).
"""
from fastapi import Request

from litellm.proxy._types import UserAPIKeyAuth

GOOD_KEY = "sk-test-good"


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    if api_key == GOOD_KEY:
        return UserAPIKeyAuth(api_key=api_key)
    raise Exception("invalid api key")
