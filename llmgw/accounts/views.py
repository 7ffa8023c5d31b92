"""POST /api/v1/token, and the throttle in front of the login pages."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth import authenticate
from django.http import HttpRequest, HttpResponse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from llmgw.accounts import throttle, tokens
from llmgw.parsers import FormParser, JSONParser


def _too_many(seconds: int) -> str:
    return f"Too many wrong passwords from this address; try again in {seconds} s."


class LoginSerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)
    name = serializers.CharField(max_length=100, required=False, default="api")


class TokenView(APIView):  # type: ignore[misc]  # DRF ships no types
    """A username and password in, a new API token out: shown in this
    answer and never again (only its digest is kept). Each call makes
    another token; old ones stay valid until they expire or are deleted."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    parser_classes = [JSONParser, FormParser]

    @extend_schema(
        request=LoginSerializer,
        responses={
            200: inline_serializer(
                "Token",
                {"token": serializers.CharField(), "expires_at": serializers.DateTimeField()},
            )
        },
    )
    def post(self, request: Request) -> Response:
        body = LoginSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        username = body.validated_data["username"]
        wait = throttle.retry_after(request._request, username)
        if wait is not None:
            return Response(
                {"detail": _too_many(wait)},
                status=status.HTTP_429_TOO_MANY_REQUESTS,
                headers={"Retry-After": str(wait)},
            )
        # A wrong password is counted by the user_login_failed signal.
        user = authenticate(
            request._request, username=username, password=body.validated_data["password"]
        )
        if user is None:
            return Response(
                {"non_field_errors": ["Unable to log in with provided credentials."]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        created = tokens.create_token(user, body.validated_data["name"])
        return Response({"token": created.secret, "expires_at": created.token.expires_at})


def throttled_login(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A login page that answers 429 to a POST from an address that has
    guessed too often; its wrong passwords are counted by the signal."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "POST":
            wait = throttle.retry_after(request, request.POST.get("username", ""))
            if wait is not None:
                response = HttpResponse(_too_many(wait), status=429, content_type="text/plain")
                response["Retry-After"] = str(wait)
                return response
        return view(request, *args, **kwargs)

    return wrapped
