package lua

// People links identities to persons, unlinks them and stores persons'
// zones: see people.lua (a script of its own: not on the decision path).
var People = read("people.lua")
