"""django-oscar (PyPI ``django-oscar`` 4.2) as the embedded shop and its admin dashboard
(WebArena's ``shopping`` and ``shopping_admin`` keys).

A minimal Django project is written into the site's directory (``shop_project/``), migrated into
``seed.sqlite3`` and seeded by :mod:`.oscar_seed` (a catalogue of categories and products with
prices and stock, WebArena's customer ``emma.lopez@gmail.com`` with past orders, other customers,
and the ``admin`` staff account; a fixed ``random.Random`` seed, nothing downloaded).

Two gunicorn servers run the same project on two loopback ports: the storefront (``shopping``)
and the dashboard (``shopping_admin``, base URL ``<port>/dashboard``, whose own login page takes a
username, so WebArena's ``admin`` / ``admin1234`` account works). They use
different session and CSRF cookie names: cookies are not port-scoped, and a task that needs both
logins (WebArena's storage state holds every site's cookies) must keep both sessions. Sessions
are signed cookies, so a reset (the seed copied over the live SQLite file between requests,
``CONN_MAX_AGE = 0``) logs nobody out. The search index (Whoosh, via haystack) is built from the
seed and not updated in real time (products an agent adds are listed, not found by search).
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Union

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.core.waits import Deadline
from guigym.envs.web.webarena.login import LoginRecipe
from guigym.envs.web.webarena.sites._process import (checked_timeout, free_port, kill_group, start_deadline,
                                                     start_failed, wait_answering)

PROJECT = "shop_project"
ROLES = ("shopping", "shopping_admin")
#: Oscar's customer login (``/accounts/login/``: "Email address", "Password", button "Log In");
#: the dashboard's login (``/dashboard/login/``: "Username", "Password", button "Login"). Probes: the
#: account page and the dashboard redirect a logged-out browser to the login page.
LOGINS = {
    "shopping": LoginRecipe("/accounts/login/", (("css:#id_login-username", "username"),
                                                 ("css:#id_login-password", "password")),
                            "css:button[name=login_submit]", "/accounts/profile/"),
    "shopping_admin": LoginRecipe("/login/", (("css:#id_username", "username"), ("css:#id_password", "password")),
                                  "css:input[type=submit]", "/", "Dashboard"),
}


def _settings_text(secret: str) -> str:
    """The project's settings: Oscar's documented set-up, SQLite, loopback only. The role
    (``GUIGYM_SHOP_ROLE``) picks cookie names and the login page."""
    return f'''"""Settings of the embedded shop (written by guigym.envs.web.webarena.sites.oscar_shop; do not edit)."""
import os

from oscar import INSTALLED_APPS as OSCAR_APPS
from oscar.defaults import *  # noqa: F401,F403 - Oscar's documented way to start its settings

BASE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the site's directory: relocatable
ROLE = os.environ.get("GUIGYM_SHOP_ROLE", "shopping")
SECRET_KEY = {secret!r}
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
# Oscar's search app forked (Oscar's documented way to change a class): its forms load a page's
# products in one query instead of one per product (``{PROJECT}/search/forms.py``)
INSTALLED_APPS = [("{PROJECT}.search.apps.SearchConfig" if a == "oscar.apps.search.apps.SearchConfig" else a)
                  for a in OSCAR_APPS] + ["sorl.thumbnail"]
SITE_ID = 1
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files without the rest of the stack
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware", "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware", "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware", "oscar.apps.basket.middleware.BasketMiddleware",
    "django.contrib.flatpages.middleware.FlatpageFallbackMiddleware",
]
TEMPLATES = [{{
    "BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
    "DIRS": [os.path.join(BASE_DIR, "{PROJECT}", "templates")],  # the project's oscar/base.html first
    "OPTIONS": {{"context_processors": [
        "django.template.context_processors.debug", "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth", "django.template.context_processors.i18n",
        "django.contrib.messages.context_processors.messages",
        "oscar.apps.search.context_processors.search_form", "oscar.apps.checkout.context_processors.checkout",
        "oscar.apps.communication.notifications.context_processors.notifications",
        "oscar.core.context_processors.metadata"]}},
}}]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": os.path.join(BASE_DIR, "live.sqlite3"),
                         "CONN_MAX_AGE": 0}}}}
# nothing the reset restores is cached in the server: the one cache is sorl's thumbnail index,
# derived from image files that no reset changes (its database copy would cost a query per image)
CACHES = {{"default": {{"BACKEND": "django.core.cache.backends.dummy.DummyCache"}},
          "thumbnails": {{"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "TIMEOUT": None}}}}
THUMBNAIL_CACHE = "thumbnails"
SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
SESSION_COOKIE_NAME = f"guigym_{{ROLE}}_session"
CSRF_COOKIE_NAME = f"guigym_{{ROLE}}_csrftoken"
AUTHENTICATION_BACKENDS = ["oscar.apps.customer.auth_backends.EmailBackend",
                           "django.contrib.auth.backends.ModelBackend"]
LOGIN_URL = "/dashboard/login/" if ROLE == "shopping_admin" else "/accounts/login/"
LOGIN_REDIRECT_URL = "/dashboard/" if ROLE == "shopping_admin" else "/accounts/profile/"
HAYSTACK_CONNECTIONS = {{"default": {{"ENGINE": "haystack.backends.whoosh_backend.WhooshEngine",
                                    "PATH": os.path.join(BASE_DIR, "whoosh_index")}}}}
HAYSTACK_SIGNAL_PROCESSOR = "haystack.signals.BaseSignalProcessor"
ROOT_URLCONF = "{PROJECT}.urls"
WSGI_APPLICATION = "{PROJECT}.wsgi.application"
LANGUAGE_CODE = "en-us"
LANGUAGES = [("en-us", "English")]  # one language: no 90-option language picker on every page
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
STATIC_ROOT = os.path.join(BASE_DIR, "static")
MEDIA_URL = "/media/"
MEDIA_ROOT = os.path.join(BASE_DIR, "media")
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
THUMBNAIL_DEBUG = False
OSCAR_SHOP_NAME = "One Stop Market"
OSCAR_DEFAULT_CURRENCY = "USD"
OSCAR_INITIAL_ORDER_STATUS = "Pending"
OSCAR_INITIAL_LINE_STATUS = "Pending"
OSCAR_ORDER_STATUS_PIPELINE = {{"Pending": ("Processing", "Canceled"), "Processing": ("Shipped", "Canceled"),
                               "Shipped": ("Complete",), "Complete": (), "Canceled": ()}}
OSCAR_LINE_STATUS_PIPELINE = OSCAR_ORDER_STATUS_PIPELINE
LOGGING = {{"version": 1, "disable_existing_loggers": False}}
'''


_URLS = '''"""URLs of the embedded shop: Oscar (storefront and /dashboard/) and media files (DEBUG is off,
so Django's static view is mounted explicitly; static files are WhiteNoise's)."""
from django.apps import apps
from django.conf import settings
from django.urls import include, path, re_path
from django.views.static import serve

urlpatterns = [
    re_path(r"^media/(?P<path>.*)$", serve, {"document_root": settings.MEDIA_ROOT}),
    path("", include(apps.get_app_config("oscar").urls[0])),
]
'''

#: the forked search app (settings' INSTALLED_APPS): Oscar's classes, with search results that load
#: their products in bulk (haystack's ``load_all``: one query per page, not one per product)
_SEARCH_APP = {
    "__init__.py": "",
    "apps.py": f'''from oscar.apps.search import apps


class SearchConfig(apps.SearchConfig):
    name = "{PROJECT}.search"
''',
    "search_indexes.py": "from oscar.apps.search.search_indexes import ProductIndex  # noqa: F401 - found per app\n",
    "forms.py": '''from oscar.apps.search import forms


class SearchForm(forms.SearchForm):
    def search(self):
        return super().search().load_all()


class BrowseCategoryForm(forms.BrowseCategoryForm):
    def search(self):
        return super().search().load_all()


class CategoryForm(forms.CategoryForm):
    def search(self):
        return super().search().load_all()
''',
}

#: Oscar's base template with jQuery from the shop's own static files: Oscar asks a CDN first and
#: falls back to its copy, and a browser that may not leave the sites waits on the refused request
#: before the fallback (~140 ms per page on this box); the page ends up with the same jQuery
_BASE_TEMPLATE = '''{% extends "oscar/base.html" %}
{% load static %}
{% block cdn_scripts %}
            <script src="{% static "oscar/js/jquery/jquery.min.js" %}"></script>
{% endblock %}
'''

_WSGI = f'''import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "{PROJECT}.settings")
application = get_wsgi_application()
'''


#: idle-machine seconds each gunicorn may take to answer its first request (x the load factor)
START_BASE_S = 60.0


class OscarShopSite:
    """The seeded shop and its dashboard served on loopback (see the module docstring).

    Args:
        workdir: the site's own directory (created): the project, ``seed.sqlite3``, ``live.sqlite3``,
            ``static/``, ``media/``, ``whoosh_index/``.
        start_timeout_s: how long each gunicorn may take to answer its first request;
            None (default): 60 idle-machine seconds stretched by the machine's load
            (:func:`._process.start_deadline`); a number: exactly that many seconds.
    """

    key = "shopping"

    def __init__(self, workdir: Union[str, Path], start_timeout_s: Optional[float] = None) -> None:
        self.workdir = Path(workdir).resolve()
        self.logins = dict(LOGINS)
        self.resets_sessions = False  # signed-cookie sessions live in the browser, not in the database
        self.start_timeout_s = checked_timeout("start_timeout_s", start_timeout_s)
        self.seed = self.workdir / "seed.sqlite3"
        self.live = self.workdir / "live.sqlite3"
        self.ports: dict[str, int] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The storefront's base URL."""
        if "shopping" not in self.ports:
            raise EnvInfraError("the shop site is not started")
        return f"http://127.0.0.1:{self.ports['shopping']}"

    @property
    def urls(self) -> dict[str, str]:
        """``shopping`` -> the storefront, ``shopping_admin`` -> the dashboard (``.../dashboard``)."""
        if len(self.ports) < len(ROLES):
            raise EnvInfraError("the shop site is not started")
        return {"shopping": self.url, "shopping_admin": f"http://127.0.0.1:{self.ports['shopping_admin']}/dashboard"}

    def _env(self, role: str = "shopping") -> dict[str, str]:
        # only what Django needs: no host secrets reach the app
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workdir), "LANG": "C.UTF-8",
                "DJANGO_SETTINGS_MODULE": f"{PROJECT}.settings", "GUIGYM_SHOP_ROLE": role,
                "PYTHONPATH": os.pathsep.join([str(self.workdir), *(p for p in sys.path if p)])}

    def _run(self, argv: list[str], what: str, timeout_s: float = 900) -> None:
        res = subprocess.run(argv, env=self._env(), cwd=self.workdir, capture_output=True, timeout=timeout_s)
        if res.returncode != 0:
            raise EnvInfraError(f"{what} for the shop failed: {res.stderr.decode(errors='replace')[-800:]}")

    def build(self) -> Path:
        """Write the project, migrate, seed, index and collect static files; ``seed.sqlite3`` last (atomic)."""
        try:
            import gunicorn  # noqa: F401
            import oscar  # noqa: F401
            import sorl.thumbnail  # noqa: F401
            import whitenoise  # noqa: F401
        except ImportError as e:
            raise ConfigError(f"the shop site needs {e.name} (pip install guigym[web-sites])") from e
        proj = self.workdir / PROJECT
        proj.mkdir(parents=True, exist_ok=True)
        (proj / "__init__.py").write_text("")
        (proj / "settings.py").write_text(_settings_text(secrets.token_urlsafe(40)))
        (proj / "urls.py").write_text(_URLS)
        (proj / "wsgi.py").write_text(_WSGI)
        (proj / "templates" / "oscar").mkdir(parents=True, exist_ok=True)
        (proj / "templates" / "oscar" / "base.html").write_text(_BASE_TEMPLATE)
        (proj / "search").mkdir(exist_ok=True)
        for name, text in _SEARCH_APP.items():
            (proj / "search" / name).write_text(text)
        self.live.unlink(missing_ok=True)
        django = [sys.executable, "-m", "django"]
        self._run(django + ["migrate", "--noinput"], "django migrate")
        self._run([sys.executable, "-m", "guigym.envs.web.webarena.sites.oscar_seed"], "seeding")
        self._run(django + ["rebuild_index", "--noinput"], "django rebuild_index")
        self._run(django + ["collectstatic", "--noinput"], "django collectstatic")
        missing = Path(sys.modules["oscar"].__file__).parent / "static" / "oscar" / "img" / "image_not_found.jpg"
        (self.workdir / "media").mkdir(exist_ok=True)
        if missing.exists():  # Oscar's placeholder must sit in MEDIA_ROOT for the thumbnailer
            shutil.copyfile(missing, self.workdir / "media" / "image_not_found.jpg")
        tmp = self.workdir / ".seed.building.sqlite3"
        shutil.copyfile(self.live, tmp)
        os.replace(tmp, self.seed)
        return self.seed

    def start(self) -> str:
        """Build the seed if missing, restore it, serve both roles on 127.0.0.1; returns the shop URL."""
        if not self.seed.exists():
            self.build()
        self.reset()
        for role in ROLES:
            for _ in range(3):  # the port may be taken between choosing and binding it
                self.ports[role] = free_port()
                self._procs[role] = subprocess.Popen(
                    [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{self.ports[role]}", "--workers", "1",
                     "--threads", "4", "--worker-class", "gthread", "--log-level", "warning",
                     f"{PROJECT}.wsgi:application"],
                    env=self._env(role), cwd=self.workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True)
                deadline = self.start_deadline(role)
                if self._wait_ready(role, deadline):
                    break
                kill_group(self._procs.pop(role))
                if deadline.expired():
                    break  # a hang, not a port taken meanwhile
            if role not in self._procs:
                self.close()
                raise EnvInfraError(start_failed(f"the shop's {role} server", deadline))
        return self.url

    def start_deadline(self, role: str = "shopping") -> Deadline:
        """The hang guard of one start attempt of ``role``'s gunicorn."""
        return start_deadline(self.start_timeout_s, START_BASE_S, f"the shop's {role} server to answer on 127.0.0.1")

    def _wait_ready(self, role: str, deadline: Deadline) -> bool:
        return wait_answering(self._procs.get(role), f"http://127.0.0.1:{self.ports[role]}/catalogue/", deadline,
                              request_timeout_s=5, poll_s=0.1)

    def reset(self) -> float:
        """Put the seed back (copy next to the live file, then rename over it); returns seconds."""
        t0 = time.perf_counter()
        tmp = self.workdir / ".live.restoring.sqlite3"
        shutil.copyfile(self.seed, tmp)
        os.replace(tmp, self.live)
        return time.perf_counter() - t0

    def close(self) -> None:
        procs, self._procs = self._procs, {}
        for proc in procs.values():
            kill_group(proc)
        self.ports = {}

    def __enter__(self) -> "OscarShopSite":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
