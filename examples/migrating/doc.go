// Package migrating holds the examples of docs/MIGRATING.md: each
// difference a user of redis_rate, ulule/limiter, throttled,
// golang.org/x/time/rate or redis-cell meets, as an Example function run
// by go test on the memory backend with a fixed clock, and checked on a
// real redis-server too. The package itself is empty; see the _test.go
// files.
package migrating
