"""Data sources: synthetic generation, readers for MATH/GSM8K/SFT files, and the prepare_math split."""
