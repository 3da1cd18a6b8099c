"""Reference ODE and discrete-map module of attention dynamics (consensus paper; power-method paper App. D).

Tokens are rows: an array of shape (n, d) or (runs, n, d); y[..., i, :] is the papers' y_i.
Everything runs in float64 torch. See docs/math.md §7–8 for the formulas.
"""

from .bridge import layer_matrix_dynamics, principal_eigenvector, random_layer_matrix
from .diagnostics import (
    alignment, consensus_error, consensus_reached, consensus_time, hemisphere_witness, in_open_hemisphere, lyapunov,
    wendel_monte_carlo, wendel_probability,
)
from .fields import (
    AttentionField, DiagonalModulation, attention, continuous_field, discrete_step, iterate, oja_step, single_head_step,
)
from .geometry import NonFiniteStateError, manifold_drift, project, random_tokens
from .integrate import METHODS, SOLVERS, RungeKutta, Solution, Tableau, solve, solve_tokens
from .result import SetupResult
from .setups import SETUPS, run_setup
from .stability import (
    bipartite_eigenvalues, bipartite_point, bipartite_spectrum, bipartite_stability, consensus_eigenvalues,
    consensus_point, find_equilibria, map_jacobian, schur_cohen_stable, tangent_basis, tangent_eigenvalues,
    tangent_jacobian,
)

__all__ = [
    "AttentionField", "DiagonalModulation", "attention", "continuous_field", "discrete_step", "single_head_step", "oja_step",
    "iterate", "solve", "solve_tokens", "Solution", "METHODS", "SOLVERS", "RungeKutta", "Tableau", "project", "random_tokens",
    "manifold_drift", "NonFiniteStateError", "consensus_error", "lyapunov", "alignment",
    "hemisphere_witness", "in_open_hemisphere", "wendel_probability", "wendel_monte_carlo",
    "consensus_reached", "consensus_time", "map_jacobian", "tangent_basis", "tangent_jacobian",
    "tangent_eigenvalues", "consensus_point", "bipartite_point", "find_equilibria",
    "consensus_eigenvalues", "bipartite_spectrum", "bipartite_eigenvalues", "bipartite_stability",
    "schur_cohen_stable", "SetupResult", "SETUPS", "run_setup", "layer_matrix_dynamics",
    "principal_eigenvector", "random_layer_matrix",
]
