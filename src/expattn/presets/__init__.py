"""``expattn simulate`` presets: each module registers named experiments with ``register_claim``
(``command="simulate"``), one claim ID per preset, returning a ``Record`` and writing plots."""
