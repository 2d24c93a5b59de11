// A memo for values made from a key that recurs (a path's segments, a secret's HMAC states, a stored number's
// text): each is made once and kept, and the whole memo starts over once it holds `limit` entries, so that keys
// that never recur cannot grow it without end.

/** `make(key)`, made once per key while the memo holds fewer than `limit` entries. */
export function boundedMemo<K, V>(limit: number, make: (key: K) => V): (key: K) => V {
  const made = new Map<K, V>();
  return (key) => {
    let value = made.get(key);
    if (value === undefined && !made.has(key)) {
      if (made.size >= limit) made.clear();
      value = make(key);
      made.set(key, value);
    }
    return value as V;
  };
}
