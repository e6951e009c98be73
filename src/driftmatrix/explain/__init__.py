"""Explanations of trained checkpoints: gradient saliency maps and how concentrated they are."""
