"""The CPU oracle (C++ megamoe::reference) over NumPy, usable without a GPU.

Tokens of all ranks are stacked rank-major: x [N, H], topk_idx [N, K] (-1 = masked),
topk_weights [N, K]; rank_tokens [R] gives each rank's count (default N / R each).
Results are dicts of NumPy arrays, e.g. moe_forward(...)["out"] float64 [N, H].
"""

from . import _core

_oracle = _core.reference
LoraWeights = _oracle.LoraWeights
Precision = _oracle.Precision
QuantizedMatrix = _oracle.QuantizedMatrix
QuantizedWeights = _oracle.QuantizedWeights
RoutingSkew = _oracle.RoutingSkew
WeightInit = _oracle.WeightInit
calibrate_fc2_input_scales = _oracle.calibrate_fc2_input_scales
dequantize_expert = _oracle.dequantize_expert
moe_forward = _oracle.moe_forward
quantize_matrix = _oracle.quantize_matrix
random_bf16 = _oracle.random_bf16
random_inputs = _oracle.random_inputs
random_lora = _oracle.random_lora
random_routing = _oracle.random_routing
random_weights = _oracle.random_weights
side_lora_backward = _oracle.side_lora_backward
side_lora_forward = _oracle.side_lora_forward


def dequantize(matrix):
    """All experts of a QuantizedMatrix as float32 [E, rows, cols] (global scales included)."""
    import numpy as np

    return np.stack([dequantize_expert(matrix, e) for e in range(matrix.experts)])


__all__ = [
    "LoraWeights", "Precision", "QuantizedMatrix", "QuantizedWeights", "RoutingSkew",
    "WeightInit", "calibrate_fc2_input_scales", "dequantize", "dequantize_expert",
    "moe_forward", "quantize_matrix", "random_bf16", "random_inputs", "random_lora",
    "random_routing", "random_weights", "side_lora_backward", "side_lora_forward",
]
