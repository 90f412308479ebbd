<?php
// A worker held for `ms` milliseconds doing nothing: the pool, not a CPU, is the ceiling
// (capacity = workers ÷ sleep). tests/harness/stack.rs serves it.
usleep(1000 * (int) ($_GET['ms'] ?? 40));
echo "slept\n";
