<?php
// A fixed CPU-bound loop: `rounds` chained MD5s (about 7 ms at 50,000 rounds on the 2-core VM
// of docs/performance.md), so php-fpm's CPU is the ceiling on the one core the stack runs on.
$hash = 'loader';
$rounds = (int) ($_GET['rounds'] ?? 50000);
for ($i = 0; $i < $rounds; $i++) {
    $hash = md5($hash);
}
echo $hash, "\n";
