"""The pieces a GPLVM is made of, below the model classes: each row's observed inputs beside its
latents (:mod:`.covariates`), q(u) with a shared covariance, the data term in closed form
(:mod:`.psi_statistics`) or importance-weighted, and the initial values chosen from the data."""
