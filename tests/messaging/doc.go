// Package messaging holds the simulation of issue 37's messaging caps
// (sim_test.go): 200 recipients in 20 IANA zones over the 14 days from
// Monday 2026-03-23 00:00 UTC, the window of 2026 that holds the most DST
// changes of both kinds (Europe's, Jerusalem's, Beirut's, Nuuk's, the
// Azores', Troll's spring forward; Australia's, Lord Howe's, New Zealand's,
// Chatham's, Chile's, Easter Island's fall back), with mixed priorities,
// message classes and identities, run on the memory backend and on Redis
// and a Redis Cluster whose clocks the test sets (internal/redistest.Clock),
// each decision checked against the test's own oracle and the three runs
// against each other. It has no code of its own outside the test.
//
//	go test -run TestSimulation -v ./tests/messaging/
//
// The Redis runs need redis-server, redis-cli and a C compiler (cc); they
// skip without them, unless FREQCAP_REQUIRE_SERVERS=1.
package messaging
