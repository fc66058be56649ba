"""flower_digits: a Flower / PyTorch app on scikit-learn's 8x8 digits (no download)."""
