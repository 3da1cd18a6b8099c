"""The evaluation harness: held-out answers judged (``evaluate``), the judges (``judge``) and the
choices made on the selection questions (``selection``), and how far a judge agrees with hand labels (``agreement``). Imports nothing on its own: the modules
are imported where they are used."""
