"""Stage 2: fit acceptance behaviour from a profile with scipy and turn it into a sampleable model."""
