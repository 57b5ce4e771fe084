"""Pure selection algorithms on tensors (no Avalanche import): one module per selector."""
