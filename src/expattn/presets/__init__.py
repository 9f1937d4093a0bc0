"""``expattn simulate`` presets: each module defines ``Preset`` subclasses that register themselves with
``register_preset`` (``presets/base.py``), one named experiment of one claim ID each, returning a ``Record`` and
writing plots."""
