"""OSWorld metrics, one module per app family (``desktop_env/evaluators/metrics/<family>.py``):

* :mod:`.general` -- exact/fuzzy/list/JSON matches, text files, OS settings (``general.py``,
  ``basic_os.py``, ``vlc.py``'s config checks), ``infeasible``;
* :mod:`.table` (calc: ``compare_table``) over :mod:`.table_rules` (charts, pivots, styles...);
* :mod:`.docs` (Writer tables, spacing, ``compare_docx_files``, PDFs) and :mod:`.writer` (Writer
  formatting, fonts, PDF pages, EPUB); :mod:`.slides` (``compare_pptx_files``) and
  :mod:`.impress` (Impress checks, LibreOffice settings);
* :mod:`.gimp` and :mod:`.images` (SSIM, brightness, size); :mod:`.chrome`; :mod:`.apps`
  (tabs, bookmarks, extensions, app config, a11y tree); :mod:`.thunderbird`; :mod:`.vlc`
  (settings, playing state, audio/video with :mod:`.media` fingerprints); :mod:`.file` (lists,
  JSON, CSV, archives); :mod:`.misc` (OS, sqlite, VS Code, multi-app: upstream's basic_os.py,
  others.py, ...);
* :mod:`.utils` -- helpers several of them share (``match_value_to_rule``, ``compare_urls``,
  ``read_text_lines``, ``read_text``), as upstream's ``utils.py``.

Each module registers into :data:`guigym.envs.desktop.evaluators.base.METRICS` on import;
:func:`guigym.envs.desktop.evaluators.load_all` imports them all. Nothing is imported here.
"""
