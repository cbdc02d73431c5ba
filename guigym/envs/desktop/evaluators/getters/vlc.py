"""OSWorld app getters that ask a running app over its own local interface: VLC's HTTP status
(``desktop_env/evaluators/getters/vlc.py`` ``get_vlc_playing_info``).

OSWorld requests ``http://<vm ip>:8080/requests/status.xml`` from the host with the password
``password`` (the one its VLC tasks start VLC's HTTP interface with). Here a stdlib-only Python
one-liner runs the request *inside* the desktop through ``/execute`` (the local sandbox may share
no network with the host; a VM exposes the port only inside) and prints the body base64-encoded.
It first checks that the process listening on the port is VLC's own binary
(:mod:`.port_owner`): an agent's server answering "playing" there is read as no VLC at all.
"""
from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Mapping
from typing import Any, Optional

from guigym.core.errors import EnvInfraError
from guigym.envs.desktop.evaluators.base import GETTERS, GetterContext, _cache_target, _need, atomic_write
from guigym.envs.desktop.evaluators.getters.general import _home_file_to_cache
from guigym.envs.desktop.evaluators.getters.port_owner import PORT_OWNER_CODE, VLC_NAMES, allowed_arg

log = logging.getLogger(__name__)

#: VLC's HTTP interface as OSWorld's VLC tasks start it (``--http-port 8080 --http-password password``)
VLC_HTTP_PORT = 8080
VLC_HTTP_PASSWORD = "password"

_VLC_STATUS = PORT_OWNER_CODE + r'''
import base64, json, sys, urllib.error, urllib.request
port, password = int(sys.argv[1]), sys.argv[2]
verdict, detail = port_owner_verdict(port, tuple(sys.argv[3].split(",")), allowed=json.loads(sys.argv[4]))
if verdict != "ok":  # "none" | "impostor" | "unknown": an answer from it would not be VLC's
    sys.stdout.write("%s %s" % (verdict.upper(), detail))
    sys.exit(0)
req = urllib.request.Request("http://127.0.0.1:%d/requests/status.xml" % port)
req.add_header("Authorization", "Basic " + base64.b64encode((":" + password).encode()).decode())
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    body = opener.open(req, timeout=10).read()
except urllib.error.HTTPError as e:
    sys.stdout.write("HTTP %d" % e.code)
    sys.exit(0)
except (urllib.error.URLError, OSError) as e:
    sys.stdout.write("DOWN %s" % e)
    sys.exit(0)
sys.stdout.write("OK " + base64.b64encode(body).decode())
'''


@GETTERS.register("vlc_playing_info")
def get_vlc_playing_info(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """VLC's ``/requests/status.xml`` saved to ``cache_dir/dest``; its path, or None when VLC's
    HTTP interface does not answer or refuses (as upstream, which logs the status code), or when
    the port is held by anything but VLC's binary, or by a socket no process can be seen to own
    (``unknown``: an agent can park a listening socket in a unix socket's queue, so that no
    process holds it; an answer that cannot be verified is not read, and the task scores as if
    VLC were not running, never a lost episode: docs/security.md)."""
    dest = _need(spec, "dest")
    res = ctx.client.execute(["python3", "-c", _VLC_STATUS, str(VLC_HTTP_PORT), VLC_HTTP_PASSWORD, ",".join(VLC_NAMES),
                              allowed_arg(ctx.client)],
                             shell=False, timeout=40)
    out = str(res.get("output") or "") if isinstance(res, Mapping) else ""
    if not isinstance(res, Mapping) or res.get("returncode") not in (None, 0) or not out:
        raise EnvInfraError(f"asking VLC's HTTP interface in the desktop failed: {res!r}"[:500])
    if out.startswith(("IMPOSTOR ", "UNKNOWN ")):  # an agent's stand-in, or unverifiable: never trusted
        log.warning("vlc_playing_info: not read: %s", out[:300])
        return None
    if not out.startswith("OK "):
        log.info("vlc_playing_info: no status from VLC (%s)", out[:200])
        return None
    try:
        body = base64.b64decode(out[3:], validate=True)
    except (binascii.Error, ValueError):
        raise EnvInfraError("the VLC status helper printed no base64") from None
    target = _cache_target(ctx, dest)
    atomic_write(target, body)
    return str(target)


@GETTERS.register("vlc_config")
def get_vlc_config(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """VLC's ``~/.config/vlc/vlcrc`` copied to ``cache_dir/dest`` (None when VLC never wrote it)."""
    return _home_file_to_cache(ctx, ".config/vlc/vlcrc", _need(spec, "dest"))
