"""People's records: personal API tokens, profiles and invitations (tables kept from llamon_web).

API tokens: programs authenticate as their user with ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class ApiToken(models.Model):
    """A personal API token. Only a SHA-256 of the secret is stored; the secret is shown once.

    The token acts with its user's roles *at the time of use* (a role removed from the user is
    removed from their tokens at once); ``max_role`` optionally caps it lower (e.g. a viewer-only
    token for a served agent that only reads the registry).
    """

    ROLE_CHOICES = [("viewer", "viewer"), ("editor", "editor"), ("admin", "admin")]

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    # The public part of the token (``llamon_<prefix>_<secret>``): shown in lists, used to find the row.
    prefix = models.CharField(max_length=16, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True)
    max_role = models.CharField(max_length=8, choices=ROLE_CHOICES, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # None: never (tokens made before expiry existed, or an operator who sets no lifetime).
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "llamon_web_apitoken"  # created before people had their own app
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} (llamon_{self.prefix}_…)"

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def active(self) -> bool:
        """Whether the token still authenticates (not revoked, not expired)."""
        return self.revoked_at is None and not self.expired


class UserProfile(models.Model):
    """What a person chose for themself: the interface language ('' = the browser's)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="llamon_profile"
    )
    language = models.CharField(_("language"), max_length=8, blank=True)

    class Meta:
        db_table = "llamon_web_userprofile"
        verbose_name = _("user profile")
        verbose_name_plural = _("user profiles")

    def __str__(self) -> str:
        return f"{self.user_id}: {self.language or 'browser'}"


class UserInvite(models.Model):
    """A one-time link to set a password. Only a SHA-256 of the secret is stored; it expires."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="llamon_invites"
    )
    token_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "llamon_web_userinvite"
        ordering = ["-created_at", "-id"]
        verbose_name = _("invitation")
        verbose_name_plural = _("invitations")

    def __str__(self) -> str:
        return f"invite {self.pk} for user {self.user_id}"
