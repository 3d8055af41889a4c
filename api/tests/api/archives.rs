//! Uploads of archives that break a rule: each refused with a problem
//! document, writing nothing.
