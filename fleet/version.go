package fleet

// SetPolicyVersion sets the policy-store version this process runs (see
// driver.PolicyVersion; 0: none), announced with its policies from the
// next flush on (Announcement.Version). Call it whenever the process
// switches versions, then Announce the version's policies: from a
// change of version on, only the policies named by Announce or used by a
// decision after it are announced (those of former versions, removed or
// replaced, are no longer announced; their last announcements fade as
// Reader.Announced's within passes). Setting the current version again
// changes nothing.
func (r *Recorder) SetPolicyVersion(v int64) {
	r.mu.Lock() // serialises version changes with each other and with registrations
	defer r.mu.Unlock()
	if r.version.Load() == v {
		return
	}
	r.version.Store(v)
	r.gen.Add(1)
	for _, ps := range r.list {
		ps.announced.Store(0)
	}
}

// PolicyVersion returns the version SetPolicyVersion last set.
func (r *Recorder) PolicyVersion() int64 { return r.version.Load() }
