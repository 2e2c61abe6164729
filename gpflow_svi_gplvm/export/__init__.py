"""Export: a trained model as a TensorFlow SavedModel that serves with TensorFlow alone
(:mod:`.saved_model`), and the folder it is written to, replaced whole (:mod:`.folder`)."""
