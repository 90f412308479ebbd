<?php
// A page from the database: the seeded rows of one group (PostgreSQL scans the whole table
// for them: no index on `grp`), each then signed `rounds` times over in PHP — work on both
// sides of the connection, so neither process alone fills the one core they share. On a
// persistent connection per php-fpm worker; STACK_PG is set by the pool's config.
$db = pg_pconnect(getenv('STACK_PG'));
$result = pg_query_params(
    $db,
    'SELECT id, price, name FROM items WHERE grp = $1 ORDER BY price DESC',
    [mt_rand(0, 99)]
);
if ($result === false) {
    http_response_code(500);
    exit(pg_last_error($db));
}
$rounds = (int) ($_GET['rounds'] ?? 20);
$signature = '';
$total = 0.0;
foreach (pg_fetch_all($result) as $row) {
    $total += (float) $row['price'];
    $sign = $row['name'];
    for ($i = 0; $i < $rounds; $i++) {
        $sign = md5($sign . $row['id']);
    }
    $signature = md5($signature . $sign);
}
printf("%d rows, total %.2f, signature %s\n", pg_num_rows($result), $total, $signature);
