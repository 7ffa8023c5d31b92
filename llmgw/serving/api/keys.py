"""/api/v1/keys: the gateway's API keys, for operators.

The key itself is in the answer to the POST that creates it and nowhere
else: not in the list, not in the database, not in a log. Admins see and
revoke every key; operators make keys for themselves, for the models they
name, and see, limit and revoke their own; viewers see their own.

A key's limits (requests_per_minute, tokens_per_minute,
max_concurrent_requests; null is none) are set when it is made or by a
PATCH; its usage is what the gateway processes last saved, a few seconds
behind the requests.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from llmgw.accounts import roles
from llmgw.accounts.permissions import ActionRoles, IsOperator
from llmgw.serving import keys
from llmgw.serving.models import LIMIT_FIELDS, ApiKey, KeyUsage


def _limit(help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=1,
        max_value=keys.MAX_LIMIT,
        allow_null=True,
        required=False,
        help_text=help_text + "; null for no limit",
    )


class LimitsSerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    requests_per_minute = _limit("Requests a minute, across every gateway process")
    tokens_per_minute = _limit("Prompt and completion tokens a minute, as the engines report them")
    max_concurrent_requests = _limit("Requests in flight at once")


def usage_of(rows: list[KeyUsage]) -> dict[str, object]:
    by_model = {
        row.model: {
            "requests": row.requests,
            "prompt_tokens": row.prompt_tokens,
            "completion_tokens": row.completion_tokens,
        }
        for row in rows
    }
    total = {
        field: sum(m[field] for m in by_model.values())
        for field in ("requests", "prompt_tokens", "completion_tokens")
    }
    return {**total, "models": by_model}


class ApiKeySerializer(serializers.ModelSerializer):  # type: ignore[misc]  # DRF ships no types
    owner = serializers.CharField(source="owner.username", default=None, read_only=True)
    models = serializers.SerializerMethodField()
    usage = serializers.SerializerMethodField(
        help_text="Requests and tokens since the key was made, in all and per model"
    )

    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "owner",
            "all_models",
            "models",
            "created_at",
            "revoked_at",
            "last_used_at",
            *LIMIT_FIELDS,
            "usage",
        ]

    def get_models(self, obj: ApiKey) -> list[str]:
        return sorted(m.name for m in obj.allowed_models.all())

    def get_usage(self, obj: ApiKey) -> dict[str, object]:
        return usage_of(list(obj.usage.all()))


class CreateKeySerializer(LimitsSerializer):
    name = serializers.CharField(max_length=100)
    models = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    all_models = serializers.BooleanField(required=False, default=False)


class CreatedKeySerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="Shown once; store it now.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]


class ApiKeyViewSet(ActionRoles, viewsets.GenericViewSet):  # type: ignore[misc]  # DRF ships no types
    serializer_class = ApiKeySerializer
    # A name (the active key of that name) or an id (any key, revoked too).
    lookup_value_regex = "[^/]+"
    action_roles = {"create": IsOperator, "revoke": IsOperator, "partial_update": IsOperator}

    def get_queryset(self) -> QuerySet[ApiKey]:
        queryset = ApiKey.objects.select_related("owner").prefetch_related(
            "allowed_models", "usage"
        )
        if not roles.is_admin(self.request.user):
            queryset = queryset.filter(owner=self.request.user)
        return queryset

    def get_object(self) -> ApiKey:
        value = self.kwargs["pk"]
        queryset = self.get_queryset()
        # ASCII digits only: "²".isdigit() is True and int("²") raises. Up to
        # 18 of them, within the id column's range: a longer number is no key
        # either, not a 500.
        if value.isascii() and value.isdigit() and len(value) <= 18:
            found = queryset.filter(pk=int(value))
        else:
            found = queryset.filter(name=value, revoked_at__isnull=True)
        api_key: ApiKey | None = found.first()
        if api_key is None:
            raise Http404(f"no key {value}")
        return api_key

    def list(self, request: Request) -> Response:
        return Response(self.get_serializer(self.get_queryset(), many=True).data)

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(request=CreateKeySerializer, responses={201: CreatedKeySerializer})
    def create(self, request: Request) -> Response:
        body = CreateKeySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # An all-model key also reaches every model added later, so it is
        # not an operator's to make: they name what the key is for.
        if body.validated_data["all_models"] and not roles.is_admin(request.user):
            raise PermissionDenied("only an admin may make a key for all models; name the models")
        try:
            created = keys.create_key(
                body.validated_data["name"],
                request.user,
                body.validated_data["models"],
                body.validated_data["all_models"],
                {f: body.validated_data[f] for f in LIMIT_FIELDS if f in body.validated_data},
            )
        except keys.ApiKeyError as refused:
            return Response({"detail": str(refused)}, status=status.HTTP_400_BAD_REQUEST)
        data = dict(ApiKeySerializer(created.api_key).data)
        data["key"] = created.key
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=LimitsSerializer, responses=ApiKeySerializer)
    def partial_update(self, request: Request, pk: str) -> Response:
        """Set or lift the key's limits; those not named stay as they are."""
        body = LimitsSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        unknown = sorted(set(request.data) - set(LIMIT_FIELDS))
        if unknown:
            return Response(
                {f: ["not a limit; a key's other fields do not change"] for f in unknown},
                status=status.HTTP_400_BAD_REQUEST,
            )
        try:
            api_key = keys.set_limits(self.get_object(), dict(body.validated_data))
        except keys.ApiKeyError as refused:
            return Response({"detail": str(refused)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(self.get_serializer(api_key).data)

    @extend_schema(request=None, responses=ApiKeySerializer)
    @action(detail=True, methods=["post"])  # type: ignore[untyped-decorator]  # DRF ships no types
    def revoke(self, request: Request, pk: str) -> Response:
        api_key = keys.revoke_key(self.get_object())
        return Response(self.get_serializer(api_key).data)
