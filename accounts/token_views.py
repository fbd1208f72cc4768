"""The "API tokens" page: your tokens, a form to make one (its secret shown once), revoke."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from accounts import token_services
from accounts.models import ApiToken
from accounts.roles import has_role, require_role
from core.errors import DomainError


class TokenForm(forms.Form):
    name = forms.CharField(
        label=_("Name"),
        max_length=100,
        help_text=_("Where it is used, like ci-pipeline or served-agent."),
    )
    expires_days = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=100_000,
        label=_("Expires after (days)"),
        help_text=_("Empty: this site's default. 0: never, where the operator allows it."),
    )
    max_role = forms.ChoiceField(
        required=False,
        label=_("At most"),
        choices=[
            ("", _("my role")),
            ("viewer", _("viewer (read)")),
            ("editor", _("editor")),
            ("admin", _("admin")),
        ],
        help_text=_("A token never holds more than your own role; cap it lower for programs that only read."),
    )


@require_GET
@require_role("viewer")
def token_list(request: HttpRequest) -> HttpResponse:
    """Your tokens (every user's for admins with ?all=1) and the form to create one."""
    show_all = request.GET.get("all") == "1" and has_role(request.user, "admin")
    tokens = token_services.token_list(user=request.user, all_users=show_all)
    return render(
        request, "accounts/token_list.html", {"tokens": tokens, "form": TokenForm(), "show_all": show_all}
    )


@never_cache
@require_POST
@require_role("viewer")
def token_create(request: HttpRequest) -> HttpResponse:
    """Create a token and show its secret on this response only (it is never stored in clear)."""
    form = TokenForm(request.POST)
    created = None
    if form.is_valid():
        try:
            created = token_services.token_create(actor=request.user, **form.cleaned_data)
        except DomainError as exc:
            form.add_error(exc.field if exc.field in ("name", "expires_days") else None, exc.message)
    tokens = token_services.token_list(user=request.user)
    context = {
        "tokens": tokens,
        "form": TokenForm() if created else form,
        "created": created,
        "show_all": False,
    }
    return render(request, "accounts/token_list.html", context, status=201 if created else 400)


@require_POST
@require_role("viewer")
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke one of your tokens (an admin: anyone's); someone else's token is a 404, not even confirmed."""
    token = get_object_or_404(ApiToken, pk=pk)
    if token.user_id != request.user.pk and not has_role(request.user, "admin"):
        raise Http404(gettext("No such token."))
    token_services.token_revoke(actor=request.user, token=token)
    messages.success(
        request,
        gettext("Revoked %(name)s: programs using it are refused from now on.") % {"name": token.name},
    )
    return redirect("tokens")
