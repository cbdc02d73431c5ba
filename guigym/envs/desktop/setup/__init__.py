"""OSWorld task setup (``config``) steps run against a desktop: :func:`run_setup` and the step
handlers (:mod:`.steps`), the browse-history step (:mod:`.history`). Errors and the host cache
helpers are defined at the bottom of the evaluators (:mod:`guigym.envs.desktop.evaluators.base`),
which getters share; they are re-exported here, so ``from guigym.envs.desktop.setup import ...``
keeps working as when this was one module.
"""
from guigym.envs.desktop.setup.steps import (  # noqa: F401
    STEP_HANDLERS, UNSUPPORTED_STEPS, MissingResourceError, MissingToolError, SetupContext,
    SetupUnavailableError, compare_urls, download_cache_path, fetch_url_to_cache, map_chrome_kill,
    map_chrome_profile, program_of, run_setup,
)
from guigym.envs.desktop.setup.steps import __all__  # noqa: F401
