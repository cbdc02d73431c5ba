"""WebArena-v0: WebArena / WebArena-Lite task configs, evaluators and the browser env."""
