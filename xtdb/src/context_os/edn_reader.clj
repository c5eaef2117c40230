(ns context-os.edn-reader
  "A fast reader for the EDN that clients send the front end (submit-tx bodies above all), which
  gives the value `clojure.edn/read-string` gives, or leaves the text to it.

  Why: clojure.edn reads a string a character at a time through a PushbackReader into a
  StringBuilder. A submit-tx body of 100 turns of a coding session (820 kB, 301 documents) took
  29 ms to read, of the 52 ms the whole submit took; a string of that size alone, 22 ms. This
  reader scans the String itself and takes runs without escapes whole (`substring`).

  What it reads: maps, vectors, lists, sets, strings (with the escapes t, r, n, b, f, backslash,
  double quote, and u with four hex digits), keywords and symbols of the common characters,
  integers that fit in a long (decimal, no leading zero), decimal floats, nil, true, false, and
  the tags #inst and #uuid. Each value is
  built by the call clojure.edn makes (`RT/map`, `LazilyPersistentVector/create`,
  `PersistentList/create`, `PersistentHashSet/createWithCheck`, `Keyword/intern`,
  `Long/parseLong`, `Double/parseDouble`, the default data readers), so a document read here is
  the same value, of the same classes, in the same order, as clojure.edn's: it hashes the same.

  What it must never do: read a text otherwise than clojure.edn would. Anything outside the
  above (a character literal, a comment, #_, ##Inf, a ratio, a big, radix or octal number, an
  octal escape, another tag, a name with rarer characters, text that is not EDN) gives up on the
  whole text, which `read-string*` then hands to clojure.edn: it reads it or throws its own
  error. tests/store/xtdb_front_end_edn_check.clj checks both readers on random values and texts."
  (:import [clojure.lang Keyword LazilyPersistentVector PersistentHashSet
            PersistentList RT Symbol]
           [java.time Instant]
           [java.util ArrayList Date]
           [java.util.regex Pattern]))

(def ^:private ^Exception give-up
  ;; thrown, never seen outside: one instance (a throw then costs no stack trace)
  (Exception. "not for the fast reader"))

(def ^:private ^Pattern plain-name
  ;; a symbol's or keyword's [ns/]name that clojure.edn reads as it is written; each part starts
  ;; with a character that is not a digit (symbolPat in clojure.lang.EdnReader)
  #"[A-Za-z*+!_?<>=.\-][A-Za-z0-9*+!_?<>=.\-]*(?:/[A-Za-z*+!_?<>=.\-][A-Za-z0-9*+!_?<>=.\-]*)?")

(def ^:private ^Pattern plain-long #"[-+]?(?:0|[1-9][0-9]{0,17})")

(def ^:private ^Pattern plain-double
  ;; floatPat of clojure.lang.EdnReader without the M suffix, with a point or an exponent (an
  ;; integer token never gets here)
  #"[-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?")

(defn- token-end
  "Where the token starting at i ends: at whitespace or at a character clojure.edn ends a
  token with (a terminating macro character)."
  ^long [^String s ^long i]
  (let [n (.length s)]
    (loop [j i]
      (if (< j n)
        (let [c (.charAt s j)]
          (if (or (Character/isWhitespace c)
                  (= c \,) (= c \") (= c \;) (= c \^) (= c \() (= c \)) (= c \[) (= c \])
                  (= c \{) (= c \}) (= c \\))
            j
            (recur (inc j))))
        j))))

(defn- skip-ws ^long [^String s ^long i]
  (let [n (.length s)]
    (loop [i i]
      (if (< i n)
        (case (.charAt s i)
          (\space \, \newline \tab \return) (recur (inc i))
          i)
        i))))

(declare read-form)

(defn- next-backslash
  "The first backslash at or after k; pos[1] keeps the last one found (-1: none left), so a
  text is searched once however many strings it holds."
  ^long [^String s ^long k ^longs pos]
  (let [b (aget pos 1)]
    (if (and (>= b 0) (< b k))
      (let [b (long (.indexOf s (int \\) (int k)))]
        (aset pos 1 b)
        b)
      b)))

(defn- read-escape
  "Appends the character the escape at b (a backslash) stands for; the index after it."
  ^long [^String s ^long b ^StringBuilder sb]
  (let [n (.length s)]
    (when (>= (inc b) n) (throw give-up))
    (case (.charAt s (inc b))
      \t (do (.append sb \tab) (+ b 2))
      \r (do (.append sb \return) (+ b 2))
      \n (do (.append sb \newline) (+ b 2))
      \\ (do (.append sb \\) (+ b 2))
      \" (do (.append sb \") (+ b 2))
      \b (do (.append sb \backspace) (+ b 2))
      \f (do (.append sb \formfeed) (+ b 2))
      \u (do (when (> (+ b 6) n) (throw give-up))
             (loop [k (+ b 2) code 0]
               (if (< k (+ b 6))
                 (let [d (Character/digit (.charAt s k) 16)]
                   (when (neg? d) (throw give-up))
                   (recur (inc k) (+ (* code 16) d)))
                 (do (.append sb (char code))
                     k))))
      (throw give-up))))

(defn- read-string-literal
  "The string whose opening quote is at i; pos[0] gets the index after its closing quote. Runs
  between escapes are found with indexOf and copied whole."
  [^String s ^long i ^longs pos]
  (let [start (inc i)
        q (long (.indexOf s (int \") (int start)))
        _ (when (neg? q) (throw give-up))
        b (next-backslash s start pos)]
    (if (or (neg? b) (> b q))
      (do (aset pos 0 (inc q))
          (.substring s start q))
      (let [sb (StringBuilder.)]
        (loop [run start q q b b]
          (if (or (neg? b) (> b q))
            (do (.append sb s (int run) (int q))
                (aset pos 0 (inc q))
                (.toString sb))
            (let [_ (.append sb s (int run) (int b))
                  k (read-escape s b sb)
                  q (if (< q k) (long (.indexOf s (int \") (int k))) q)]
              (when (neg? q) (throw give-up))
              (recur k q (next-backslash s k pos)))))))))

(defn- read-items
  "The forms up to the closing character `close`, whose opening is just before i."
  ^ArrayList [^String s ^long i ^longs pos close]
  (let [items (ArrayList.)
        n (.length s)
        close (char close)]
    (loop [i i]
      (let [i (skip-ws s i)]
        (when (>= i n) (throw give-up))
        (if (= (.charAt s i) close)
          (do (aset pos 0 (inc i)) items)
          (do (.add items (read-form s i pos))
              (recur (aget pos 0))))))))

(defn- read-token [^String s ^long i ^longs pos]
  (let [end (token-end s i)
        token (.substring s i end)
        c (.charAt s i)]
    (aset pos 0 end)
    (cond
      (or (Character/isDigit c)
          (and (or (= c \-) (= c \+)) (< (inc i) (.length s)) (Character/isDigit (.charAt s (inc i)))))
      (cond
        (.matches (.matcher plain-long token)) (Long/parseLong token)
        (and (.matches (.matcher plain-double token))
             (or (>= (.indexOf token ".") 0) (>= (.indexOf token "e") 0) (>= (.indexOf token "E") 0)))
        (Double/parseDouble token)
        :else (throw give-up))

      (= c \:) (let [name (.substring token 1)]
                 (if (.matches (.matcher plain-name name))
                   (Keyword/intern (Symbol/intern name))
                   (throw give-up)))

      (= token "nil") nil
      (= token "true") true
      (= token "false") false
      (.matches (.matcher plain-name token)) (Symbol/intern token)
      :else (throw give-up))))

(def ^:private ^Pattern utc-ms
  ;; the instant every client writes (UTC, milliseconds), with fields in range; the calendar's
  ;; own checks (30 February) are java.time's, which refuses what clojure.instant refuses. From
  ;; the year 1600 only: clojure.instant's calendar is Julian before October 1582, java.time's
  ;; Gregorian (the year 1 is two days apart)
  #"(?:1[6-9]|[2-9][0-9])[0-9]{2}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{3}Z")

(defn- read-inst
  "#inst as clojure.edn reads it (clojure.instant/read-instant-date, a java.util.Date), ten
  times faster for a UTC time in milliseconds."
  [x]
  (if (and (string? x) (.matches (.matcher utc-ms ^String x)))
    (Date/from (Instant/parse x))
    ((get default-data-readers 'inst) x)))

(defn- read-tagged [^String s ^long i ^longs pos]
  ;; i: just after the #
  (let [end (token-end s i)
        tag (.substring s i end)
        reader (case tag
                 "inst" read-inst
                 "uuid" (get default-data-readers 'uuid)
                 (throw give-up))
        j (skip-ws s end)]
    (when (>= j (.length s)) (throw give-up))
    (reader (read-form s j pos))))

(defn- read-form
  "The form that starts at i (no whitespace before it); pos[0] gets the index after it."
  [^String s ^long i ^longs pos]
  (let [c (.charAt s i)]
    (case c
      \" (read-string-literal s i pos)
      \{ (let [^ArrayList items (read-items s (inc i) pos \})]
           (when (odd? (.size items)) (throw give-up))
           (RT/map (.toArray items)))
      \[ (LazilyPersistentVector/create (read-items s (inc i) pos \]))
      \( (let [^ArrayList items (read-items s (inc i) pos \))]
           (if (.isEmpty items) PersistentList/EMPTY (PersistentList/create items)))
      \# (let [j (inc i)]
           (when (>= j (.length s)) (throw give-up))
           (case (.charAt s j)
             \{ (PersistentHashSet/createWithCheck ^java.util.List (read-items s (inc j) pos \}))
             (\_ \# \: \" \^ \' \= \! \< \( \[ \}) (throw give-up)
             (read-tagged s j pos)))
      (\} \] \) \; \\ \^ \' \` \~ \@) (throw give-up)
      (read-token s i pos))))

(defn- read-fast
  "The one value in `s`, or `give-up` when it is not for this reader."
  [^String s]
  (try
    (let [pos (long-array [0 0])
          i (skip-ws s 0)]
      (if (< i (.length s))
        (read-form s i pos)
        give-up))
    (catch Exception _ give-up)))

(defn read-string*
  "The one value `(fallback s)` reads from `s`, where `fallback` is `clojure.edn/read-string`
  with options that leave #inst and #uuid to the default data readers (as xtdb.codec's
  `read-edn-string-with-readers` does): read here when the text is of the kinds above, else by
  `fallback`, which reads it or throws."
  [fallback ^String s]
  (let [v (read-fast s)]
    (if (identical? v give-up)
      (fallback s)
      v)))
