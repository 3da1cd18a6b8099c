"""Reference ODE and discrete maps of attention dynamics (consensus paper; power-method paper App. D)."""
