"""The "Users" pages (admins): list, add or invite, set the role, deactivate, see and revoke tokens.

Also the public "set your password" page an invitation links to, and the language choice in the
user menu. Thin: each view validates a form and makes one call to accounts.services.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts import services as user_services
from accounts import token_services
from accounts.models import ApiToken
from accounts.roles import require_role
from core.errors import DomainError, PendingApproval

ROLE_CHOICES = [
    ("viewer", gettext_lazy("viewer (reads everything)")),
    ("editor", gettext_lazy("editor (writes rules, cases, agents, runs)")),
    ("admin", gettext_lazy("admin (everything, including MCP servers and users)")),
]


class UserAddForm(forms.Form):
    username = forms.CharField(label=gettext_lazy("Username"), max_length=user_services.MAX_USERNAME_CHARS)
    email = forms.CharField(
        label=gettext_lazy("Email (optional)"), required=False, max_length=user_services.MAX_EMAIL_CHARS
    )
    role = forms.ChoiceField(label=gettext_lazy("Role"), choices=ROLE_CHOICES, initial="viewer")
    password = forms.CharField(
        label=gettext_lazy("Password"),
        required=False,
        max_length=user_services.MAX_PASSWORD_CHARS,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text=gettext_lazy(
            "Leave it empty to get a one-time link instead, with which they set their own."
        ),
    )


class RoleForm(forms.Form):
    role = forms.ChoiceField(label=gettext_lazy("Role"), choices=ROLE_CHOICES)


class SetPasswordForm(forms.Form):
    password1 = forms.CharField(
        label=gettext_lazy("New password"),
        max_length=user_services.MAX_PASSWORD_CHARS,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )
    password2 = forms.CharField(
        label=gettext_lazy("The same password again"),
        max_length=user_services.MAX_PASSWORD_CHARS,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )

    def clean(self) -> dict:
        data = super().clean() or {}
        if data.get("password1") and data.get("password1") != data.get("password2"):
            raise forms.ValidationError(_("The two passwords differ."))
        return data


def _invite_url(request: HttpRequest, secret: str) -> str:
    return request.build_absolute_uri(reverse("invite_accept", args=[secret]))


def _rows() -> list:
    users = list(user_services.user_list())
    for person in users:
        person.role_name = user_services.role_of(person)
    return users


def _user_or_404(pk: int):
    return get_object_or_404(get_user_model(), pk=pk)


@require_GET
@require_role("admin")
def user_list(request: HttpRequest) -> HttpResponse:
    """Every user with role, active flag, last login and active tokens; the form to add one."""
    return render(request, "accounts/user_list.html", {"users": _rows(), "form": UserAddForm()})


@never_cache
@require_POST
@require_role("admin")
def user_create(request: HttpRequest) -> HttpResponse:
    """Add a user (with a password, or invited: the one-time link is shown on this response only)."""
    form = UserAddForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            user = user_services.user_create(
                actor=request.user,
                username=data["username"],
                email=data["email"],
                role=data["role"],
                password=data["password"] or None,
            )
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            if data["password"]:
                messages.success(request, _("Added %(name)s.") % {"name": user.get_username()})
                return redirect("users")
            created = user_services.invite_create(actor=request.user, user=user)
            return _detail(request, user, invite_url=_invite_url(request, created.secret), status=201)
    context = {"users": _rows(), "form": form}
    return render(request, "accounts/user_list.html", context, status=400)


def _detail(request: HttpRequest, user, *, invite_url: str | None = None, status: int = 200) -> HttpResponse:
    context = {
        "person": user,
        "person_role": user_services.role_of(user),
        "person_approver": user_services.is_approver_flag(user),
        "role_form": RoleForm(initial={"role": user_services.role_of(user) or "viewer"}),
        "tokens": user_services.user_tokens(user),
        "invite_url": invite_url,
        "invite_hours": settings.LLAMON_INVITE_HOURS,
    }
    return render(request, "accounts/user_detail.html", context, status=status)


@require_GET
@require_role("admin")
def user_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One user: role, active flag, tokens (revoke), a new invitation link."""
    return _detail(request, _user_or_404(pk))


def _pending(request: HttpRequest, exc: PendingApproval) -> HttpResponse:
    """A grant of power while agents are protected: recorded as a change request, shown there."""
    messages.info(request, str(exc))
    return redirect(exc.url)


def _refused(request: HttpRequest, pk: int, exc: DomainError) -> HttpResponse:
    messages.error(request, exc.message)
    return _detail(request, _user_or_404(pk), status=400)


@require_POST
@require_role("admin")
def user_set_role(request: HttpRequest, pk: int) -> HttpResponse:
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("The role must be viewer, editor or admin."))
        return _detail(request, _user_or_404(pk), status=400)
    try:
        user = user_services.user_set_role(
            actor=request.user, user=_user_or_404(pk), role=form.cleaned_data["role"]
        )
    except PendingApproval as exc:
        return _pending(request, exc)
    except DomainError as exc:
        return _refused(request, pk, exc)
    messages.success(
        request,
        _("%(name)s is now %(role)s.") % {"name": user.get_username(), "role": user_services.role_of(user)},
    )
    return redirect("user_detail", pk=pk)


@require_POST
@require_role("admin")
def user_set_active(request: HttpRequest, pk: int) -> HttpResponse:
    active = request.POST.get("active") == "1"
    try:
        user = user_services.user_set_active(actor=request.user, user=_user_or_404(pk), active=active)
    except PendingApproval as exc:
        return _pending(request, exc)
    except DomainError as exc:
        return _refused(request, pk, exc)
    if active:
        messages.success(request, _("%(name)s can log in again.") % {"name": user.get_username()})
    else:
        messages.success(
            request,
            _("%(name)s is deactivated: they cannot log in and their API tokens are refused.")
            % {"name": user.get_username()},
        )
    return redirect("user_detail", pk=pk)


@require_POST
@require_role("admin")
def user_set_approver(request: HttpRequest, pk: int) -> HttpResponse:
    """Give or take the permission to approve change requests on protected agents."""
    approver = request.POST.get("approver") == "1"
    try:
        user = user_services.user_set_approver(actor=request.user, user=_user_or_404(pk), approver=approver)
    except PendingApproval as exc:
        return _pending(request, exc)
    messages.success(
        request,
        _("%(name)s may approve change requests.") % {"name": user.get_username()}
        if approver
        else _("%(name)s may no longer approve change requests.") % {"name": user.get_username()},
    )
    return redirect("user_detail", pk=pk)


@never_cache
@require_POST
@require_role("admin")
def user_invite(request: HttpRequest, pk: int) -> HttpResponse:
    """A new one-time set-password link for the user, shown on this response only."""
    user = _user_or_404(pk)
    try:
        created = user_services.invite_create(actor=request.user, user=user)
    except DomainError as exc:
        return _refused(request, pk, exc)
    return _detail(request, user, invite_url=_invite_url(request, created.secret), status=201)


@require_POST
@require_role("admin")
def user_token_revoke(request: HttpRequest, pk: int, token_pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_pk, user_id=pk)
    token_services.token_revoke(actor=request.user, token=token)
    messages.success(
        request, _("Revoked %(name)s: programs using it are refused from now on.") % {"name": token.name}
    )
    return redirect("user_detail", pk=pk)


@never_cache
@require_http_methods(["GET", "POST"])
@require_role("public")
def invite_accept(request: HttpRequest, secret: str) -> HttpResponse:
    """The page an invitation links to: set a password, then log in. A bad link is a 404 that says why."""
    invite = user_services.invite_find(secret)
    if invite is None:
        return render(request, "accounts/invite_invalid.html", status=404)
    form = SetPasswordForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user_services.invite_accept(secret=secret, password=form.cleaned_data["password1"])
        except DomainError as exc:
            form.add_error("password1" if exc.field == "password" else None, exc.message)
        else:
            messages.success(request, _("Your password is set; log in with it."))
            return redirect("login")
    status = 400 if request.method == "POST" else 200
    return render(
        request, "accounts/invite_accept.html", {"form": form, "person": invite.user}, status=status
    )


@require_POST
@require_role("viewer")
def language_set(request: HttpRequest) -> HttpResponse:
    """Keep the user's language choice and go back where they were."""
    try:
        user_services.language_set(user=request.user, language=request.POST.get("language", ""))
    except DomainError as exc:
        messages.error(request, exc.message)
    target = request.POST.get("next") or ""
    # Only a path on this site; redirect() would also try "NaN" as a view name (NoReverseMatch, a 500).
    if not target.startswith("/") or not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = reverse("home")
    return HttpResponseRedirect(target)
