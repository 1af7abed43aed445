"""Code that runs inside each torchrun rank: the planted slowdown, and the hook that times an unmodified script's
optimizer steps. It imports neither pytest nor the stages that read the records."""
