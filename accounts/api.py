"""People's API operations: personal API tokens (list, create from a browser session, revoke)."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest
from ninja import Field, ModelSchema, Query, Router, Status

from accounts import token_services
from accounts.api_auth import roles
from accounts.models import ApiToken
from core.api import DbId, StrictIn, error_responses, get_or_404

router = Router(tags=["tokens"])


class TokenIn(StrictIn):
    name: str = Field(max_length=100, examples=["ci-pipeline"])
    max_role: str = Field(
        "",
        pattern=r"^(|viewer|editor|admin)$",
        description="Cap the token below your own role (empty: none).",
    )
    expires_days: int | None = Field(
        None, ge=0, le=100_000, description="Lifetime in days (default: the site's; 0: never, if allowed)."
    )


class TokenOut(ModelSchema):
    user: str
    active: bool

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "max_role",
            "created_at",
            "last_used_at",
            "revoked_at",
            "expires_at",
        ]

    @staticmethod
    def resolve_user(obj: ApiToken) -> str:
        return obj.user.get_username()


class TokenCreatedOut(TokenOut):
    token: str = Field(description="The secret: shown this once, never again.")

    @staticmethod
    def resolve_token(obj: ApiToken) -> str:
        return obj.secret  # type: ignore[attr-defined]


class TokenFilterIn(StrictIn):
    all: bool = Field(False, description="Every user's tokens (admin).")


@router.get("/tokens", response={200: list[TokenOut], **error_responses()}, auth=roles("viewer"))
def list_tokens(request: HttpRequest, filters: Query[TokenFilterIn]) -> Any:
    """Your API tokens (an admin may ask for everyone's with ``all=true``); secrets are never listed."""
    return token_services.token_list(user=request.auth, all_users=filters.all)  # type: ignore[attr-defined]  # set by django-ninja's auth


@router.post(
    "/tokens", response={201: TokenCreatedOut, **error_responses()}, auth=roles("viewer", session_only=True)
)
def create_token(request: HttpRequest, payload: TokenIn) -> Any:
    """Create a personal API token (from a browser session only); the secret is in ``token``, once."""
    actor = request.auth  # type: ignore[attr-defined]  # set by django-ninja's auth
    created = token_services.token_create(
        actor=actor, name=payload.name, max_role=payload.max_role, expires_days=payload.expires_days
    )
    created.token.secret = created.secret  # type: ignore[attr-defined]  # on this response only
    return Status(201, created.token)


@router.delete("/tokens/{token_id}", response={200: TokenOut, **error_responses(404)}, auth=roles("viewer"))
def revoke_token(request: HttpRequest, token_id: DbId) -> Any:
    """Revoke a token: your own, or anyone's as an admin. Revoking twice changes nothing."""
    token = get_or_404(ApiToken, "API token", pk=token_id)
    if token.user_id != request.auth.pk and "admin" not in request.api_roles:  # type: ignore[attr-defined]
        raise Http404(f"There is no API token with id {token_id}.")  # others' tokens are not even confirmed
    return token_services.token_revoke(actor=request.auth, token=token)  # type: ignore[attr-defined]  # set by django-ninja's auth
