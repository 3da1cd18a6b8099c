"""The evaluation harness: held-out answers judged (``evaluate``), the judges (``judge``, its HTTP in
``judge_client``), and how far a judge agrees with hand labels (``agreement``). Imports nothing on its
own: the modules are imported where they are used."""
