from django.apps import AppConfig


class LlamonWebConfig(AppConfig):
    name = "llamon_web"
    verbose_name = "llamon-web"
