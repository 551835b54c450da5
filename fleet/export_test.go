package fleet

// InSample reports whether the subject of shard values shard (as keys
// hold them) is in a 1/n traffic sample.
func InSample(shard string, n int) bool { return sampled(subjectHash(shard), n) }
