// Package messaging holds the simulation of issue 37's messaging caps
// (sim_test.go): 200 recipients in 20 IANA zones over the 14 days from
// Monday 2026-03-23 00:00 UTC, the 14-day window of 2026 holding the most
// DST changes of these zones (TestWindow), 15 of both kinds: London's,
// Berlin's, Athens', Jerusalem's, Beirut's, Nuuk's, the Azores' and Troll's
// spring forward; Santiago's, Easter Island's, Sydney's, Adelaide's, Lord
// Howe's, Auckland's and Chatham's fall back. The sender's attempts mix
// priorities, message classes and identities: each attempt names one of
// its recipient's identities (a third have two or three), linked to the
// person (Admin.Link), and gives no person; a quarter of the persons have
// their zone stored (Admin.SetPersonZone) and their attempts give none.
// It runs on the memory backend and on Redis and a Redis Cluster whose
// clocks the test sets (internal/redistest.Clock), holds each decision to
// the test's own oracle and the three runs to each other. It has no code
// outside its tests.
//
//	go test -run TestSimulation -v ./tests/messaging/
//
// The Redis runs need redis-server, redis-cli and a C compiler (cc); they
// skip without them, unless FREQCAP_REQUIRE_SERVERS=1.
package messaging
