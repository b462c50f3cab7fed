"""Hardware: what device this is and its dtype policy, several processes (accelerate), sharing a GPU between a run
and the playground, and where each part of a loaded model lives (device maps)."""
