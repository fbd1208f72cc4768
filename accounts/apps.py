from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """People: users, roles, invitations, API tokens and how a request is authenticated."""

    name = "accounts"
    verbose_name = "accounts"
