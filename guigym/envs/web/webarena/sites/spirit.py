"""django-spirit (PyPI ``django-spirit`` 0.14) as the embedded forum (WebArena's ``reddit`` key).

A minimal Django project is written into the site's directory (``forum_project/``: settings, URLs,
WSGI), migrated into ``seed.sqlite3`` and seeded by :mod:`.spirit_seed` (users including
WebArena's ``MarvelsGrandpa17``, subforums as categories, >= 300 topics with comments; a fixed
``random.Random`` seed, nothing downloaded). gunicorn serves it on 127.0.0.1 (one worker process,
threads). Every request opens the SQLite file afresh (``CONN_MAX_AGE = 0``), so
:meth:`SpiritSite.reset` is a copy of the seed renamed over the live file between requests.

Sessions are signed cookies (``SESSION_ENGINE = signed_cookies``), not database rows, so a reset
does not log anyone out and the env's cached login stays valid. The search index (Whoosh, via
haystack) is built once from the seed and not updated in real time: topics an agent creates are
listed and shown, but do not appear in search results (a stated difference from a live forum).
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

PROJECT = "forum_project"
#: Spirit's login form (``/user/login/``: "Username or Email", "Password", button "Login"); the
#: profile form ``/user/update/`` is the probe (a logged-out browser is sent to the login page)
LOGINS = {"reddit": LoginRecipe("/user/login/", (("css:#id_username", "username"), ("css:#id_password", "password")),
                                "css:input[type=submit][value=Login]", "/user/update/")}

def _settings_text(secret: str) -> str:
    """The project's settings: Spirit's documented base settings, SQLite, loopback only."""
    return f'''"""Settings of the embedded forum (written by guigym.envs.web.webarena.sites.spirit; do not edit)."""
import os

BASE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the site's directory: relocatable
SECRET_KEY = {secret!r}
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
    "django.contrib.messages", "django.contrib.staticfiles", "django.contrib.humanize",
    "spirit.core", "spirit.admin", "spirit.search", "spirit.user", "spirit.user.admin", "spirit.user.auth",
    "spirit.category", "spirit.category.admin", "spirit.topic", "spirit.topic.admin", "spirit.topic.favorite",
    "spirit.topic.moderate", "spirit.topic.notification", "spirit.topic.private", "spirit.topic.unread",
    "spirit.comment", "spirit.comment.bookmark", "spirit.comment.flag", "spirit.comment.flag.admin",
    "spirit.comment.history", "spirit.comment.like", "spirit.comment.poll", "djconfig", "haystack",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files without the rest of the stack (DB reads)
    "django.contrib.sessions.middleware.SessionMiddleware", "django.middleware.locale.LocaleMiddleware", "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware", "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware", "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "spirit.user.middleware.TimezoneMiddleware", "spirit.user.middleware.LastIPMiddleware",
    "spirit.user.middleware.LastSeenMiddleware", "spirit.user.middleware.ActiveUserMiddleware",
    "spirit.core.middleware.PrivateForumMiddleware", "djconfig.middleware.DjConfigMiddleware",
]
TEMPLATES = [{{
    "BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [], "APP_DIRS": True,
    "OPTIONS": {{"context_processors": [
        "django.contrib.auth.context_processors.auth", "django.template.context_processors.debug",
        "django.template.context_processors.i18n", "django.template.context_processors.media",
        "django.template.context_processors.static", "django.template.context_processors.tz",
        "django.template.context_processors.request", "django.contrib.messages.context_processors.messages",
        "djconfig.context_processors.config"]}},
}}]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": os.path.join(BASE_DIR, "live.sqlite3"),
                         "CONN_MAX_AGE": 0}}}}
CACHES = {{
    "default": {{"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "spirit_cache"}},
    "st_rate_limit": {{"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "spirit_rl_cache",
                      "TIMEOUT": None}},
}}
SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
AUTHENTICATION_BACKENDS = ["spirit.user.auth.backends.UsernameAuthBackend",
                           "spirit.user.auth.backends.EmailAuthBackend"]
HAYSTACK_CONNECTIONS = {{"default": {{"ENGINE": "haystack.backends.whoosh_backend.WhooshEngine",
                                    "PATH": os.path.join(BASE_DIR, "st_search")}}}}
HAYSTACK_SIGNAL_PROCESSOR = "haystack.signals.BaseSignalProcessor"
ROOT_URLCONF = "{PROJECT}.urls"
WSGI_APPLICATION = "{PROJECT}.wsgi.application"
LOGIN_URL = "spirit:user:auth:login"
LOGIN_REDIRECT_URL = "spirit:user:update"
LOGOUT_REDIRECT_URL = "spirit:index"
LANGUAGE_CODE = "en"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
STATIC_ROOT = os.path.join(BASE_DIR, "static")
MEDIA_URL = "/media/"
MEDIA_ROOT = os.path.join(BASE_DIR, "media")
STORAGES = {{"default": {{"BACKEND": "spirit.core.storage.OverwriteFileSystemStorage"}},
            "staticfiles": {{"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
ST_SITE_URL = os.environ.get("GUIGYM_SITE_URL", "http://127.0.0.1/")  # Spirit's absolute links
ST_EXTENDED_FONT = False
ST_RATELIMIT_ENABLE = False
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
LOGGING = {{"version": 1, "disable_existing_loggers": False}}
'''


_URLS = '''"""URLs of the embedded forum: Spirit (its static files, collected at build time, are served
by WhiteNoise's middleware)."""
from django.urls import include, re_path

import spirit.urls

urlpatterns = [
    re_path(r"", include(spirit.urls)),
]
'''

_WSGI = '''import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forum_project.settings")
application = get_wsgi_application()
'''


#: idle-machine seconds the server may take to answer its first request (x the load factor)
START_BASE_S = 60.0


class SpiritSite:
    """The seeded forum served on loopback (see the module docstring).

    Args:
        workdir: the site's own directory (created): the project, ``seed.sqlite3``, ``live.sqlite3``,
            ``static/``, ``st_search/``.
        key: the WebArena site key it stands for (default ``reddit``).
        start_timeout_s: how long gunicorn may take to answer its first request;
            None (default): 60 idle-machine seconds stretched by the machine's load
            (:func:`._process.start_deadline`); a number: exactly that many seconds.
    """

    def __init__(self, workdir: Union[str, Path], key: str = "reddit", start_timeout_s: Optional[float] = None) -> None:
        self.workdir = Path(workdir).resolve()
        self.key = key
        self.logins = {key: LOGINS["reddit"]}
        self.resets_sessions = False  # signed-cookie sessions live in the browser, not in the database
        self.start_timeout_s = checked_timeout("start_timeout_s", start_timeout_s)
        self.seed = self.workdir / "seed.sqlite3"
        self.live = self.workdir / "live.sqlite3"
        self.port: Optional[int] = None
        self._proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise EnvInfraError("the forum site is not started")
        return f"http://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        # only what Django needs: no host secrets reach the app
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workdir), "LANG": "C.UTF-8",
                "DJANGO_SETTINGS_MODULE": f"{PROJECT}.settings",
                "GUIGYM_SITE_URL": f"http://127.0.0.1:{self.port}/" if self.port else "http://127.0.0.1/",
                "PYTHONPATH": os.pathsep.join([str(self.workdir), *(p for p in sys.path if p)])}

    def _manage(self, *args: str, timeout_s: float = 600) -> None:
        res = subprocess.run([sys.executable, "-m", "django", *args], env=self._env(), cwd=self.workdir,
                             capture_output=True, timeout=timeout_s)
        if res.returncode != 0:
            raise EnvInfraError(f"django {args[0]} for the forum failed: {res.stderr.decode(errors='replace')[-800:]}")

    def build(self) -> Path:
        """Write the project, migrate, seed, index and collect static files; ``seed.sqlite3`` last (atomic)."""
        try:
            import gunicorn  # noqa: F401
            import spirit  # noqa: F401
            import whitenoise  # noqa: F401
        except ImportError as e:
            raise ConfigError(f"the forum site needs {e.name} (pip install guigym[web-sites])") from e
        proj = self.workdir / PROJECT
        proj.mkdir(parents=True, exist_ok=True)
        (proj / "__init__.py").write_text("")
        (proj / "settings.py").write_text(_settings_text(secrets.token_urlsafe(40)))
        (proj / "urls.py").write_text(_URLS)
        (proj / "wsgi.py").write_text(_WSGI)
        self.live.unlink(missing_ok=True)
        self._manage("migrate", "--noinput")
        self._manage("createcachetable")
        res = subprocess.run([sys.executable, "-m", "guigym.envs.web.webarena.sites.spirit_seed"], env=self._env(),
                             cwd=self.workdir, capture_output=True, timeout=600)
        if res.returncode != 0:
            raise EnvInfraError(f"seeding the forum failed: {res.stderr.decode(errors='replace')[-800:]}")
        self._manage("rebuild_index", "--noinput")
        self._manage("collectstatic", "--noinput")
        tmp = self.workdir / ".seed.building.sqlite3"
        shutil.copyfile(self.live, tmp)
        os.replace(tmp, self.seed)
        return self.seed

    def start(self) -> str:
        """Build the seed if missing, restore it, serve on 127.0.0.1; returns the base URL."""
        if not self.seed.exists():
            self.build()
        self.reset()
        for _ in range(3):  # the port may be taken between choosing and binding it
            self.port = free_port()
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{self.port}", "--workers", "1",
                 "--threads", "4", "--worker-class", "gthread", "--error-logfile", "-",
                 "--log-level", "warning", f"{PROJECT}.wsgi:application"],
                env=self._env(), cwd=self.workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)
            deadline = self.start_deadline()
            if self._wait_ready(deadline):
                return self.url
            self.close()
            if deadline.expired():
                break  # a hang, not a port taken meanwhile
        raise EnvInfraError(start_failed("the forum", deadline))

    def start_deadline(self) -> Deadline:
        """The hang guard of one start attempt (the forum to answer on 127.0.0.1)."""
        return start_deadline(self.start_timeout_s, START_BASE_S, "the forum to answer on 127.0.0.1")

    def _wait_ready(self, deadline: Deadline) -> bool:
        return wait_answering(self._proc, f"{self.url}/", deadline, request_timeout_s=5, poll_s=0.1)

    def reset(self) -> float:
        """Put the seed back (copy next to the live file, then rename over it); returns seconds."""
        t0 = time.perf_counter()
        tmp = self.workdir / ".live.restoring.sqlite3"
        shutil.copyfile(self.seed, tmp)
        os.replace(tmp, self.live)
        return time.perf_counter() - t0

    def close(self) -> None:
        proc, self._proc = self._proc, None
        kill_group(proc)

    def __enter__(self) -> "SpiritSite":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
