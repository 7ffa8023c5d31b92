"""/api/v1/keys: the gateway's API keys, for operators.

The key itself is in the answer to the POST that creates it and nowhere
else: not in the list, not in the database, not in a log. Admins see and
revoke every key; operators make keys for themselves, for the models they
name, and see and revoke their own; viewers see their own.
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
from llmgw.serving.models import ApiKey


class ApiKeySerializer(serializers.ModelSerializer):  # type: ignore[misc]  # DRF ships no types
    owner = serializers.CharField(source="owner.username", default=None, read_only=True)
    models = serializers.SerializerMethodField()

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
        ]

    def get_models(self, obj: ApiKey) -> list[str]:
        return sorted(m.name for m in obj.allowed_models.all())


class CreateKeySerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
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
    action_roles = {"create": IsOperator, "revoke": IsOperator}

    def get_queryset(self) -> QuerySet[ApiKey]:
        queryset = ApiKey.objects.select_related("owner").prefetch_related("allowed_models")
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
            )
        except keys.ApiKeyError as refused:
            return Response({"detail": str(refused)}, status=status.HTTP_400_BAD_REQUEST)
        data = dict(ApiKeySerializer(created.api_key).data)
        data["key"] = created.key
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=ApiKeySerializer)
    @action(detail=True, methods=["post"])  # type: ignore[untyped-decorator]  # DRF ships no types
    def revoke(self, request: Request, pk: str) -> Response:
        api_key = keys.revoke_key(self.get_object())
        return Response(self.get_serializer(api_key).data)
