//! Three-way merge of branches (`ckptfs merge`): the base is the nearest common ancestor in
//! the checkpoint graph; trees are merged path by path, skipping subtrees whose ids agree, and
//! content changed on both sides goes to a driver chosen by what it is (text, append-only,
//! SQLite), or is a named conflict. See docs/merge.md.
