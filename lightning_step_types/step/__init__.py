"""The step path: a step's return checked, converted to what Lightning's loops take, and the
step methods wrapped so that both ways in (the typed module and the callback) run it."""
