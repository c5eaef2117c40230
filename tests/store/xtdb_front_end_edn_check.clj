;; Run by tests/store/test_xtdb_front_end_edn.py: the front end's EDN printer
;; (context-os.xtdb-http/->edn) against Clojure's own (pr-str, under the same bindings) on
;; random values of every type the printer meets or falls back on, and on the real answers of an
;; in-memory node; and its EDN reader (context-os.edn-reader) against clojure.edn with XTDB's
;; readers on each of those texts and on texts written by hand. Prints "ok <count>", or the
;; first value printed or read differently, and exits 1.
(require '[context-os.xtdb-http]
         '[context-os.edn-reader :as edn-in]
         '[xtdb.api :as xt]
         '[xtdb.codec :as c])

(def ->edn @#'context-os.xtdb-http/->edn)

(defn pr-edn [x]
  (binding [*print-length* nil *print-level* nil *print-namespace-maps* false *print-meta* false]
    (pr-str x)))

(defrecord Point [x y])

(def ^java.util.Random rng (java.util.Random. (Long/parseLong (or (first *command-line-args*) "1"))))
(defn rand-int* [n] (.nextInt rng (int n)))
(defn pick [xs] (nth xs (rand-int* (count xs))))

(def chars-pool
  (vec (concat (map char (range 0 128))
               [\é \ü \ß \中 \文 \u2028 \u2029 \u00a0 \ufeff \uffff (char 0xd83d) (char 0xde00)])))

(defn rand-string []
  (if (zero? (rand-int* 8))
    "😀 emoji, \"quoted\" \\ back\\slash\n"
    (apply str (repeatedly (rand-int* 24) #(pick chars-pool)))))

(defn rand-scalar []
  (case (rand-int* 24)
    0 nil
    1 true
    2 false
    3 (rand-string)
    4 (rand-string)
    5 (keyword (pick ["a" "kind" "tx-id" "committed?" "x.y"]))
    6 (keyword (pick ["xt" "xtdb.api" "meta" "meta.x"]) (pick ["id" "tx-id" "x6162" "valid-time"]))
    7 (symbol (pick ["sym" "ns/sym" "?e" "_"]))
    8 (.nextLong rng)
    9 (pick [0 -1 Long/MIN_VALUE Long/MAX_VALUE (int 7) (short 3) (byte -2)])
    10 (.nextDouble rng)
    11 (pick [0.0 -0.0 1e300 -1.5e-300 1.0E10 ##Inf ##-Inf ##NaN (float 1.5) Double/MIN_VALUE])
    12 (pick [(bigint 12345678901234567890) 1N (biginteger 99) 1.5M 0.1M (/ 1 3)])
    13 (pick [\a \newline \space \tab \u00e9])
    14 (java.util.Date. (quot (.nextLong rng) 4000))
    15 (java.util.Date. (long (rand-int* 2000000000)))
    16 (c/new-id (rand-string))
    17 (c/new-id (keyword "k" (str (rand-int* 9))))
    18 (java.util.UUID. (.nextLong rng) (.nextLong rng))
    19 (java.sql.Timestamp. 1700000000123)
    20 (->Point 1 "two")
    21 (with-meta {:a 1} {:type :custom})
    22 (with-meta [1 2] {:tag 'x :doc "meta is not printed"})
    23 (clojure.lang.MapEntry. :k "v")))

(defn rand-value [depth]
  (if (or (>= depth 4) (< (rand-int* 10) 5))
    (rand-scalar)
    (let [n (rand-int* 6)
          items #(repeatedly n (fn [] (rand-value (inc depth))))]
      (case (rand-int* 9)
        0 (into {} (map vector (repeatedly n rand-scalar) (items)))
        1 (zipmap (map #(keyword (str "k" %)) (range 20)) (repeatedly 20 #(rand-value (inc depth))))
        2 (vec (items))
        3 (apply list (items))
        4 (set (items))
        5 (map identity (items))  ; a lazy seq
        6 (into (sorted-map) (map vector (range n) (items)))
        7 (java.util.ArrayList. ^java.util.Collection (vec (items)))
        8 (java.util.HashMap. ^java.util.Map (into {} (map vector (range n) (items))))))))

(def failures (atom 0))
(def checked (atom 0))
(def read-fast @#'context-os.edn-reader/read-fast)
(def gave-up @#'context-os.edn-reader/give-up)
(def read-fast-count (atom 0))

(defn shape
  "A value as its classes and text, in iteration order: two reads are the same only if their
  shapes are equal (= alone takes 1 for 1.0M, a vector for a list, and ##NaN for nothing)."
  [x]
  (cond
    (map? x) [(class x) (mapv (fn [[k v]] [(shape k) (shape v)]) x)]
    (coll? x) [(class x) (mapv shape x)]
    :else [(class x) (pr-str x)]))

(defn read-both [text]
  (let [theirs (try (shape (c/read-edn-string-with-readers text))
                    (catch Throwable e [:threw (class e) (.getMessage e)]))
        fast (read-fast text)
        mine (try (shape (edn-in/read-string* c/read-edn-string-with-readers text))
                  (catch Throwable e [:threw (class e) (.getMessage e)]))]
    (when-not (identical? fast gave-up) (swap! read-fast-count inc))
    [mine theirs]))

(defn check-read! [where text]
  (swap! checked inc)
  (let [[mine theirs] (read-both text)]
    (when (not= mine theirs)
      (when (zero? @failures)
        (println "MISMATCH reading" where (pr-str text))
        (println " edn-reader:" (pr-str mine))
        (println " clojure.edn:" (pr-str theirs)))
      (swap! failures inc))))

(defn check! [where x]
  (swap! checked inc)
  (check-read! where (pr-edn x))
  (let [mine (try (->edn x) (catch Throwable e (str "THREW " e)))
        theirs (try (pr-edn x) (catch Throwable e (str "THREW " e)))]
    (when (not= mine theirs)
      (when (zero? @failures)
        (println "MISMATCH in" where)
        (println " ->edn :" mine)
        (println " pr-str:" theirs))
      (swap! failures inc))))

;; random values
(dotimes [i 3000]
  (check! (str "random value " i) (rand-value 0)))

;; real answers: documents like context_os's, and odd ones
(with-open [node (xt/start-node {})]
  (let [docs (for [i (range 40)]
               (merge {:xt/id (if (even? i) (str "toolcall:" i) (pick [{:a i} i (keyword "k" (str i))]))
                       :kind "toolcall"
                       :content (rand-string)
                       :meta/turn i
                       :meta/score (* 0.5 i)
                       :meta/nested {"a" [1 2.5 nil true {"b" "c"}]}
                       :ctxos/meta-keys #{"turn" "score" "nested"}}
                      (when (zero? (mod i 3)) {:odd (vec (repeatedly 3 rand-scalar))})))
        tx (xt/submit-tx node (vec (for [d docs] [::xt/put d (java.util.Date. (+ 1700000000000 (rand-int* 100000)))])))
        _ (xt/submit-tx node [[::xt/delete "toolcall:0"] [::xt/match "toolcall:2" nil]])
        _ (xt/await-tx node (xt/submit-tx node [[::xt/evict "toolcall:4"]]))
        db (xt/db node)]
    (check! "submit-tx answer" tx)
    (check! "status" (xt/status node))
    (check! "db basis" (merge {::xt/valid-time (xt/valid-time db)} (xt/db-basis db)))
    (check! "attribute-stats" (xt/attribute-stats node))
    (check! "latest-completed-tx" (xt/latest-completed-tx node))
    (check! "tx-committed" {:tx-committed? (xt/tx-committed? node tx)})
    (with-open [log (xt/open-tx-log node nil true)]
      (check! "tx-log" (seq (doall (iterator-seq log)))))
    (check! "query" (xt/q db '{:find [(pull e [*])] :where [[e :kind "toolcall"]]}))
    (check! "query (empty)" (or (seq (xt/q db '{:find [e] :where [[e :kind "none"]]})) '()))
    (doseq [d docs :let [eid (:xt/id d)]]
      (check! "entity" (xt/entity db eid))
      (check! "entity-tx" (xt/entity-tx db eid))
      (check! "history" (seq (xt/entity-history db eid :desc {:with-docs? true :with-corrections? true}))))))

;; texts written by hand: what the Python client sends, and the edges of what the reader takes
(doseq [text ["{:tx-ops [[:xtdb.api/put {:xt/id \"a\" :content {\"k\" 1,\"l\" [1,2.5,true,nil]}} #inst \"2024-01-02T03:04:05.678Z\"]]}"
              "  [1 -2 +3 0 -0 +0 123456789012345678 1234567890123456789 9223372036854775807 99999999999999999999]"
              "[0123 0x1F 2r101 1N 1.5M 1/3 01.5 1. 1e5 -1.5E-3 .5 +.5 1e 1a ##Inf ##NaN]"
              "[\"\\t\\r\\n\\\\\\\"\\b\\f\" \"\\u00e9\\uD83D\\uDE00\" \"\\u00e\" \"\\101\" \"\\q\" \"raw\nnew\u0001line\"]"
              "[\"unterminated]" "\"a\\" "[\"a\" \"b\\\"c\" \"d\"]"
              "[:a :a/b :a.b/c :-1 :+ :a/1b :: :a:b ::a :a#b :é :a/ :/ :a/b/c]"
              "[a a/b -a + - . .5 a.b ?e _ nil/x true false nil a#b a'b / é]"
              "[\\a \\newline] ; comment" "[1 #_ 2 3]" "#{1 2 3}" "#{1 1}" "{:a 1 :a 2}" "{:a}" "{}" "[]" "()" "#{}"
              "#inst \"2024-01-02\"" "#inst \"2024-02-30T00:00:00.000Z\"" "#inst \"2023-02-29T00:00:00.000Z\""
              "#inst \"2024-02-29T23:59:59.999Z\"" "#inst \"1969-12-31T23:59:59.999Z\"" "#inst \"0001-01-01T00:00:00.000Z\"" "#inst \"1582-10-04T00:00:00.000Z\""
              "#inst \"1600-02-29T12:00:00.000Z\"" "#inst \"9999-12-31T23:59:59.999Z\""
              "#inst \"2016-12-31T23:59:60.000Z\"" "#inst \"2024-01-02T03:04:05.678-00:00\"" "#inst \"2024-01-02T03:04:05.6789Z\"" "#inst \"not a date\"" "#inst 5" "#uuid \"0f0e0d0c-0b0a-0908-0706-050403020100\""
              "#xtdb/id \"abc\"" "#foo/bar 1" "# inst \"2024-01-02\"" "#_ 1 2"
              "{:a 1} trailing [" "[1 2}" "[1 2" "" "   " "," "nil" "\u000b[1]" "[1\u000b2]" "[1\f2]"
              "{\"a\" 1,\"b\" {\"c\" [\"d\",{}]},\"e\" \"f\"}" "[1\"a\"]" "(1 (2 (3)))" "[:a\"b\"]"
              "^{:a 1} [1]" "'a" "`a" "~a" "@a" "[1,2,,3]" "{:a 1, :b 2}" "[\"\" \"\\\"\"]"]]
  (check-read! "a text written by hand" text))

(when (< @read-fast-count 1000)
  (println "the fast reader read only" @read-fast-count "texts itself")
  (swap! failures inc))

(println "read by the fast reader:" @read-fast-count)
(if (zero? @failures)
  (println "ok" @checked)
  (do (println @failures "of" @checked "printed differently") (System/exit 1)))
(shutdown-agents)
(System/exit 0)
