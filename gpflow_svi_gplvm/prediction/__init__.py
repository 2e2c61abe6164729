"""What a trained model says about new rows of Y, with every trained parameter frozen: their
latents (by optimisation or by Laplace), reconstructions, and held-out likelihoods."""
