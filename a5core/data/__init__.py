"""data: synthetic problems, readers for MATH/GSM8K/SFT files, the prepare_math split, and the SFT traces filtered
by a reward and chosen from a fixed shuffle (sft_traces.py). May import base/, grader/, config/.
"""
