"""Schedule → other forms: a standalone torch.distributed script, diagrams, canonical source."""
