"""steerformer's command line (installed as ``steerformer_cli``). Thin: parse, call the library, show."""
