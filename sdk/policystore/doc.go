// Package policystore keeps freqcap policy files in a backend's policy
// store, versioned, for every limiter to follow: the versions, their
// plans, lineage and faults, and following them. The file format itself
// is package sdk/policyfile's.
//
// A Store (New, on the backend limiters use: memory.New, redis.New, with
// the limiters' prefix, WithPrefix) plans a policy file against the
// current version (Plan: per policy and rule what changes and what its
// counts carry, see ChangeKind and Carry; Plan.String writes it for
// people) and applies it whole as the next version, if no one applied in
// between (Apply; ErrVersionConflict otherwise), refusing a plan that
// re-keys rules unless confirmed (ErrRekeyNotConfirmed). Each version
// records who applied it, when and why, its source verbatim and its
// lineage: each rule's epoch (the version that gave it its current
// identity) and its identity changes still in reach, so that a rule whose
// window, sub-windows, algorithm, calendar or zone changes starts from
// what its former self proves (sdk.WithChange) instead of afresh.
// History, Version and Rollback read and restore versions (a rollback is a
// new version).
//
// A Live (Store.Watch) follows the store: its Current snapshot is one
// complete version, replaced atomically when a newer one is applied,
// within about 2 s (the store's notifications, else a 1 s poll of the
// version's number; the document is read only when that changed).
//
// A stored version that does not load (ErrUnreadableVersion: written by
// hand or by a newer freqcap, too large, missing) costs no counts: a Live
// keeps the version in force, and plans and rollbacks are made against
// the newest version that loads (Store.Head, Plan.Against), keeping its
// rules' epochs.
//
// Underneath, the raw versions are documents as the backend keeps them
// (PolicyVersion; Store.PutPolicies, GetPolicies, PolicyHead,
// PolicyHistory, WatchPolicies). serve's PolicyService, the console's
// policy editor, package client and freqcap's policy commands all use this
// package's Plan, Version and errors.
package policystore
