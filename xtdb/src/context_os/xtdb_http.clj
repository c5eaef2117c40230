(ns context-os.xtdb-http
  "An HTTP front end for an XTDB 1.x node that speaks the documented XTDB 1.x REST API
  (/_xtdb/status, db, entity, entity-tx, query, submit-tx, await-tx, tx-committed, tx-log, ...) in
  EDN and JSON.

  Why it exists: the official module `com.xtdb/xtdb-http-server` and its Clojure dependencies
  (reitit, muuntaja, ring, jetty) are published to Clojars, which this project's machines cannot
  reach; `xtdb-core` and `xtdb-rocksdb` are on Maven Central. This namespace is written for
  context_os from the public API documentation (docs/clients/modules/ROOT/pages/http.adoc,
  1.x branch) and uses only xtdb-core and the JDK's built-in HTTP server. The engine behind it
  (transactions, bitemporal indexes, Datalog) is the real XTDB; only the transport is ours.

  What it must never do: add semantics of its own. Every endpoint is a thin call into
  `xtdb.api`, with the parameter names, status codes and EDN response shapes of the official
  server, so that a client written against it works unchanged against the official one
  (e.g. the Docker image in docker-compose.yml). Four endpoints are ours, under
  /_xtdb/context-os/: `entity-version` (entity-tx and entity in one call), `submit-tx`
  (submit-tx, await-tx and tx-committed in one call), `latest-tx` (latest-completed-tx and
  tx-committed in one call) and `entity-history` (entity's history as JSON a client parses
  faster, where JSON keeps every value); they save round trips or decoding and compute
  nothing the official calls do not, and a client falls back to those on a node without them.

  Formats, as the official server negotiates them (muuntaja): the response is JSON when the
  first acceptable type of the Accept header (by q, `*/*` last) that we produce is
  application/json, and EDN otherwise (EDN is the default: no Accept, `*/*`, anything else).
  The EDN answers are exactly what they were before JSON existed. JSON follows the official
  module (modules/http-server: json.clj and the per-endpoint encoders): the top-level keys of
  most answers camelCased by their name (`:xtdb.api/tx-id` -> `txId`, `:tx-committed?` ->
  `txCommitted?`); documents, query rows and attribute stats as they are (`:xt/id` ->
  `xt/id`); keywords written as strings without the colon, dates as yyyy-MM-dd'T'HH:mm:ss'Z'
  (UTC, whole seconds, as jsonista writes them), ids as hex. A submit-tx body with
  Content-Type application/json is read the official way: `{tx-ops: [[put, doc, valid-time?,
  end-valid-time?], ...]}` with the op names as strings, keys made keywords (`xt/id` ->
  `:xt/id`), times parsed from strings, `xt/fn` read as EDN. Not served: transit+json, the
  HTML console, text/csv.

  Used as an XTDB module: `{:context-os.xtdb-http/server {:port 3000 :host \"127.0.0.1\"}}`."
  (:require [clojure.data.json :as json]
            [clojure.edn :as edn]
            [clojure.instant :as instant]
            [clojure.string :as str]
            [clojure.tools.logging :as log]
            [context-os.edn-reader :as edn-in]
            [xtdb.api :as xt]
            [xtdb.codec :as c]
            [xtdb.system :as sys]
            [xtdb.tx.conform :as txc])
  (:import [clojure.lang BigInt IPersistentList Keyword MultiFn Ratio]
           [com.sun.net.httpserver HttpExchange HttpHandler HttpServer]
           [java.io Closeable]
           [java.math BigDecimal BigInteger]
           [java.net InetSocketAddress URLDecoder]
           [java.nio.charset StandardCharsets]
           [java.text SimpleDateFormat]
           [java.time Duration Instant LocalDate LocalDateTime LocalTime OffsetDateTime OffsetTime
            ZonedDateTime ZoneOffset]
           [java.time.format DateTimeFormatter]
           [java.util Calendar Collection Date GregorianCalendar Map SimpleTimeZone]
           [java.util.concurrent ExecutorService Executors ThreadFactory TimeoutException]
           [java.util.concurrent.atomic AtomicLong]
           [java.util.function Supplier]
           [xtdb.codec EDNId Id]))

;; ---------------------------------------------------------------------------------------------
;; Requests

(defn- camel->kebab
  "`validTime` -> `valid-time`: the official server accepts both spellings."
  [^String s]
  (-> s
      (str/replace #"([a-z0-9])([A-Z])" "$1-$2")
      (str/lower-case)))

(defn- query-params [^HttpExchange ex]
  (let [raw (.getRawQuery (.getRequestURI ex))]
    (into {}
          (for [pair (some-> raw (str/split #"&"))
                :when (not (str/blank? pair))
                :let [[k v] (str/split pair #"=" 2)
                      k (URLDecoder/decode ^String k StandardCharsets/UTF_8)
                      v (URLDecoder/decode ^String (or v "") StandardCharsets/UTF_8)]]
            [(keyword (camel->kebab k)) v]))))

(defn- bad-request [msg data]
  (ex-info msg (merge {::status 400 :error msg} data)))

(defn- param
  "Parses query parameter `k` with `parse`, or returns nil when absent. A value that does not
  parse is a 400 naming the parameter, as the official server's coercion does."
  [params k parse]
  (when-let [s (get params k)]
    (try
      (parse s)
      (catch Exception e
        (throw (bad-request (format "invalid query parameter %s=%s: %s" (name k) (pr-str s) (.getMessage e))
                            {:parameter (name k)}))))))

(defn- parse-date [s] (instant/read-instant-date s))
(defn- parse-long* [s] (Long/parseLong s))
(defn- parse-bool [s]
  (case s
    ("true" "") true
    "false" false
    (throw (IllegalArgumentException. "expected true or false"))))

(defn- read-edn [s]
  ;; clojure.edn with XTDB's readers, through a reader that is faster on what clients send
  ;; (context-os.edn-reader: the same value, or clojure.edn reads it)
  (edn-in/read-string* c/read-edn-string-with-readers s))

;; ---------------------------------------------------------------------------------------------
;; JSON, read and written as the official server's Jackson object mapper (jsonista, with
;; keyword keys) does

(defn- jackson-numbers
  "Jackson reads a JSON integer into the smallest of Integer, Long and BigInteger that holds it
  (and a document keeps that type): data.json's Longs and BigInts made so."
  [x]
  (cond
    (map? x) (into {} (map (fn [[k v]] [k (jackson-numbers v)])) x)
    (vector? x) (mapv jackson-numbers x)
    (instance? Long x) (if (<= Integer/MIN_VALUE (long x) Integer/MAX_VALUE)
                         (Integer/valueOf (int x))
                         x)
    (instance? BigInt x) (biginteger x)
    :else x))

(defn- read-json
  "A JSON text as the official server reads it: objects with keyword keys (`\"xt/id\"` ->
  `:xt/id`), arrays as vectors, integers as Integer/Long/BigInteger, decimals as Double."
  [^String s]
  (jackson-numbers (json/read-str s :key-fn keyword)))

(def ^:private ^ThreadLocal json-date-format
  ;; jsonista's default for java.util.Date: whole seconds, UTC, a literal Z
  (ThreadLocal/withInitial
   (reify Supplier
     (get [_] (doto (SimpleDateFormat. "yyyy-MM-dd'T'HH:mm:ss'Z'")
                (.setTimeZone (SimpleTimeZone. 0 "UTC")))))))

(def ^:private ^ThreadLocal json-date-key-format
  ;; Jackson's StdDateFormat, which it uses for a Date that is a map key
  (ThreadLocal/withInitial
   (reify Supplier
     (get [_] (doto (SimpleDateFormat. "yyyy-MM-dd'T'HH:mm:ss.SSS'+00:00'")
                (.setTimeZone (SimpleTimeZone. 0 "UTC")))))))

(defn- json-string! [^StringBuilder sb ^String s]
  ;; runs without escapes appended whole: every character that needs one is below 0x20, a
  ;; double quote (34) or a backslash (92), so most are passed after two int comparisons
  (.append sb \")
  (let [n (.length s)]
    (loop [start 0 i 0]
      (if (< i n)
        (let [c (int (.charAt s i))]
          (if (and (> c 34) (not (== c 92)))
            (recur start (inc i))
            (if (or (< c 0x20) (== c 34) (== c 92))
              (do (.append sb s start i)
                  (case c
                    34 (.append sb "\\\"")
                    92 (.append sb "\\\\")
                    10 (.append sb "\\n")
                    13 (.append sb "\\r")
                    9 (.append sb "\\t")
                    8 (.append sb "\\b")
                    12 (.append sb "\\f")
                    (.append sb (format "\\u%04X" c)))
                  (recur (inc i) (inc i)))
              (recur start (inc i)))))
        (.append sb s start n))))
  (.append sb \"))

(defn- json-key ^String [k]
  (cond
    (keyword? k) (str (.sym ^Keyword k))
    (string? k) k
    (nil? k) (throw (IllegalArgumentException. "a map with a nil key cannot be written as JSON"))
    (instance? Date k) (.format ^SimpleDateFormat (.get json-date-key-format) ^Date k)
    :else (str k)))

(defn- duration-seconds
  "Jackson's default for a Duration (WRITE_DURATIONS_AS_TIMESTAMPS): seconds, 9 decimals."
  [^Duration d]
  (if (and (zero? (.getSeconds d)) (zero? (.getNano d)))
    "0.0"
    (str (.add (.setScale (BigDecimal/valueOf (.getSeconds d)) 9)
               (BigDecimal/valueOf (long (.getNano d)) 9)))))

(defn- write-json! [^StringBuilder sb x]
  (cond
    (nil? x) (.append sb "null")
    (string? x) (json-string! sb x)
    (instance? Boolean x) (.append sb (str x))
    (keyword? x) (json-string! sb (str (.sym ^Keyword x)))
    (symbol? x) (json-string! sb (str x))
    (or (instance? Long x) (instance? Integer x) (instance? Short x) (instance? Byte x)
        (instance? BigInteger x) (instance? BigInt x) (instance? BigDecimal x)) (.append sb (str x))
    (or (instance? Double x) (instance? Float x)) (if (Double/isFinite (double x))
                                                      (.append sb (str x))
                                                      (json-string! sb (str x)))
    (instance? Ratio x) (.append sb (str (double x)))
    (number? x) (.append sb (str x))
    (instance? Id x) (json-string! sb (str x))
    (instance? EDNId x) (json-string! sb (str x))
    (instance? Date x) (json-string! sb (.format ^SimpleDateFormat (.get json-date-format) ^Date x))
    (instance? Instant x) (json-string! sb (.format DateTimeFormatter/ISO_INSTANT ^Instant x))
    (instance? LocalDateTime x) (json-string! sb (.format DateTimeFormatter/ISO_LOCAL_DATE_TIME ^LocalDateTime x))
    (instance? LocalDate x) (json-string! sb (.format DateTimeFormatter/ISO_LOCAL_DATE ^LocalDate x))
    (instance? LocalTime x) (json-string! sb (.format DateTimeFormatter/ISO_LOCAL_TIME ^LocalTime x))
    (instance? OffsetDateTime x) (json-string! sb (.format DateTimeFormatter/ISO_OFFSET_DATE_TIME ^OffsetDateTime x))
    (instance? ZonedDateTime x) (json-string! sb (.format DateTimeFormatter/ISO_OFFSET_DATE_TIME ^ZonedDateTime x))
    (instance? OffsetTime x) (json-string! sb (.format DateTimeFormatter/ISO_OFFSET_TIME ^OffsetTime x))
    (instance? Duration x) (.append sb (duration-seconds x))
    (bytes? x) (json-string! sb (c/base64-writer x))
    ;; the official mapper writes a quoted function, '(fn [...] ...), as its EDN text
    (and (instance? IPersistentList x) (contains? #{'fn* 'fn} (first x))) (json-string! sb (pr-str x))
    (instance? Map x) (do (.append sb \{)
                          (reduce (fn [first? [k v]]
                                    (when-not first? (.append sb \,))
                                    (json-string! sb (json-key k))
                                    (.append sb \:)
                                    (write-json! sb v)
                                    false)
                                  true
                                  x)
                          (.append sb \}))
    (or (instance? Collection x) (some-> (class x) (.isArray)))
    (do (.append sb \[)
        (reduce (fn [first? v]
                  (when-not first? (.append sb \,))
                  (write-json! sb v)
                  false)
                true
                x)
        (.append sb \]))
    :else (json-string! sb (str x))))

(defn- ->json ^String [body]
  (let [sb (StringBuilder.)]
    (write-json! sb body)
    (str sb)))

(defn- camel-case
  "A key's name in camelCase, split into words as camel-snake-kebab splits them (at `-`, `_`
  and spaces, before an upper-case letter that follows a non-upper-case one, before a digit
  that follows a non-digit, and before the last of several capitals followed by a lower-case
  letter); the first word lower-cased, the others capitalised: `tx-committed?` -> txCommitted?"
  ^String [^String s]
  (let [kind (fn [ch] (cond (contains? #{\space \tab \newline \return \- \_} ch) :sep
                            (Character/isUpperCase (char ch)) :upper
                            (Character/isLowerCase (char ch)) :lower
                            (Character/isDigit (char ch)) :number
                            :else :other))
        kinds (mapv kind s)
        n (count s)
        words (loop [words [] start 0 i 0]
                (if (>= i n)
                  (cond-> words (> i start) (conj (subs s start i)))
                  (let [a (kinds i) b (get kinds (inc i)) c (get kinds (+ i 2))]
                    (cond
                      (= a :sep) (recur (cond-> words (> i start) (conj (subs s start i))) (inc i) (inc i))
                      (or (and (not= a :upper) (= b :upper))
                          (and (not= a :number) (= b :number))
                          (and (= a :upper) (= b :upper) (= c :lower)))
                      (recur (conj words (subs s start (inc i))) (inc i) (inc i))
                      :else (recur words start (inc i))))))]
    (if (empty? words)
      ""
      (apply str (str/lower-case (first words)) (map str/capitalize (rest words))))))

(defn- camel-case-keys
  "The official JSON encoding of most answers: a map's own keys (not nested ones) camelCased by
  their name, the namespace dropped: `:xtdb.api/tx-id` -> \"txId\"."
  [m]
  (if (map? m)
    (into {} (map (fn [[k v]] [(if (or (keyword? k) (string? k)) (camel-case (name k)) k) v])) m)
    m))

(defn- req-eid
  "The entity id from eid-edn / eid-json / eid (a plain string id)."
  [params]
  (let [eid (or (param params :eid-edn read-edn)
                (param params :eid-json read-json)
                (:eid params))]
    (when (nil? eid)
      (throw (bad-request "Missing eid" {:xtdb.error/error-key :missing-eid})))
    (when-not (c/valid-id? eid)
      (throw (bad-request (str "invalid entity id: " (pr-str eid)) {})))
    eid))

(defn- db-for [node params]
  (xt/db node {::xt/valid-time (param params :valid-time parse-date)
               ::xt/tx-time (param params :tx-time parse-date)
               ::xt/tx-id (param params :tx-id parse-long*)}))

(defn- timeout-param [params]
  (some-> (param params :timeout parse-long*) (Duration/ofMillis)))

(defn- read-body [^HttpExchange ex]
  (let [s (slurp (.getRequestBody ex) :encoding "UTF-8")]
    (try
      (read-edn s)
      (catch Exception _
        (throw (bad-request "Malformed \"application/edn\" request." {}))))))

(def ^:private produced
  "The response formats we produce, by the media type that asks for them."
  {"application/edn" :edn
   "application/json" :json})

(defn- parse-q [s]
  (try
    (-> (Double/parseDouble s) (min 1.0) (max 0.0))
    (catch NumberFormatException _ nil)))

(defn- accepted-types
  "An Accept header's media types, most wanted first, ordered as the official server's
  muuntaja orders them: by q (1 if absent), stable, `*/*` after any other type of the same q.
  A malformed media range counts as nil."
  [^String accept]
  (->> (str/split accept #"[\s\n\r]*,[\s\n\r]*")
       (map (fn [fragment]
              (let [[media-range & ps] (str/split fragment #"\s*;\s*")
                    type (second (re-matches #"^\s*((\*|[^()<>@,;:\"/\[\]?={} \t]+)/(\*|[^()<>@,;:\"/\[\]?={} \t]+))$"
                                             media-range))]
                {:type type
                 :q (or (some (fn [p] (some-> (re-matches #"q=(.+)" p) second parse-q)) ps) 1.0)})))
       (sort-by #(= "*/*" (:type %)))
       (sort-by :q >)
       (map :type)))

(defn- response-format
  "`:json` or `:edn` for this request, negotiated on its Accept header; EDN unless the first
  type we produce among the acceptable ones is application/json."
  [^HttpExchange ex]
  (or (some->> (.get (.getRequestHeaders ex) "Accept")
               (str/join ",")
               (accepted-types)
               (some produced))
      :edn))

(defn- json-body?
  "Whether the request body is JSON: Content-Type application/json (parameters aside), the
  only JSON type the official server decodes."
  [^HttpExchange ex]
  (= "application/json" (some-> (.getFirst (.getRequestHeaders ex) "Content-Type")
                                (str/split #";" 2)
                                first)))

(def ^:private json-tx-decoders
  "How the official server makes JSON values of tx-ops into XTDB's, applied by xtdb-core's own
  tx-op conformer: a document's `xt/fn` is EDN text; a valid time is a date string (what does
  not parse is left for the conformer to refuse)."
  {::txc/->doc (fn [doc]
                 (if (and (map? doc) (contains? doc :xt/fn))
                   (update doc :xt/fn edn/read-string)
                   doc))
   ::txc/->valid-time (fn [vt]
                        (try
                          (instant/read-instant-date vt)
                          (catch Exception _ vt)))})

(defn- read-json-tx-body
  "A JSON submit-tx body, `{\"tx-ops\": [[\"put\", {\"xt/id\": ...}, \"2020-01-01T00:00:00Z\"], ...]}`,
  as the official server reads it: op names become `:xtdb.api/put` etc., and each op is
  conformed with `json-tx-decoders`. Anything that does not read or conform is, as there, a
  400 saying the request is malformed."
  [^HttpExchange ex]
  (try
    (-> (read-json (slurp (.getRequestBody ex) :encoding "UTF-8"))
        (update :tx-ops (fn [tx-ops]
                          (mapv (fn [op]
                                  (-> op
                                      (update 0 #(keyword "xtdb.api" %))
                                      (txc/conform-tx-op json-tx-decoders)
                                      (txc/->tx-op)))
                                tx-ops))))
    (catch Exception _
      (throw (bad-request "Malformed \"application/json\" request." {})))))

;; ---------------------------------------------------------------------------------------------
;; Endpoints: each returns [status body]

(defn- status [node _ex _params]
  [200 (xt/status node)])

(defn- db-basis [node _ex params]
  (let [db (db-for node params)]
    [200 (merge {::xt/valid-time (xt/valid-time db)} (xt/db-basis db))]))

(defn- entity [node _ex params]
  (let [eid (req-eid params)
        db (db-for node params)]
    (if (param params :history parse-bool)
      (let [sort-order (keyword (or (:sort-order params)
                                    (throw (bad-request "sort-order is required with history=true" {}))))
            _ (when-not (#{:asc :desc} sort-order)
                (throw (bad-request (str "invalid sort-order: " (name sort-order)) {})))
            bound (fn [tt-k id-k]
                    (not-empty (into {} (filter val) {::xt/tx-time (param params tt-k parse-date)
                                                      ::xt/tx-id (param params id-k parse-long*)})))]
        [200 (or (seq (xt/entity-history db eid sort-order
                                         {:with-corrections? (boolean (param params :with-corrections parse-bool))
                                          :with-docs? (boolean (param params :with-docs parse-bool))
                                          :start-valid-time (param params :start-valid-time parse-date)
                                          :end-valid-time (param params :end-valid-time parse-date)
                                          :start-tx (bound :start-tx-time :start-tx-id)
                                          :end-tx (bound :end-tx-time :end-tx-id)}))
                 '())])
      (if-let [doc (not-empty (xt/entity db eid))]
        [200 doc]
        [404 {:error (str eid " entity not found")}]))))

(defn- entity-tx [node _ex params]
  (let [eid (req-eid params)]
    (if-let [etx (xt/entity-tx (db-for node params) eid)]
      [200 etx]
      [404 {:error (str eid " entity-tx not found")}])))

(defn- query [node ^HttpExchange ex params]
  (let [body (when (= "POST" (.getRequestMethod ex)) (read-body ex))
        q (or (param params :query-edn read-edn) (:query body))
        in-args (or (param params :in-args-edn read-edn)
                    (param params :in-args-json read-json)
                    (:in-args body))]
    (when (nil? q)
      (throw (bad-request "No query provided" {:xtdb.error/error-key :no-query})))
    ;; the official server answers every format from open-q: rows in the engine's order, not
    ;; de-duplicated into a set as xt/q does (until 2026-12-02 our EDN answer was xt/q's set)
    (with-open [^Closeable rows (apply xt/open-q (db-for node params) q in-args)]
      (let [found (vec (iterator-seq rows))]
        [200 (if (= :json (response-format ex)) found (or (seq found) '()))]))))

(def ^:private unsent-sql-states
  "SQLSTATEs after which a statement surely did not commit: no connection could be made (08001,
  08004) or was there (08003), or the server was shutting down and ended the session before
  running it (57P01, 57P02, 57P03). A connection lost mid-statement (08006) is not among them:
  its commit may have happened."
  #{"08001" "08003" "08004" "57P01" "57P02" "57P03"})

(defn- not-submitted?
  "Whether `e` says the transaction log was never written: a JDBC pool that found no connection
  within its timeout (java.sql.SQLTransientConnectionException), or one of `unsent-sql-states`.
  Anything else may have written it."
  [^Throwable e]
  (some #(or (instance? java.sql.SQLTransientConnectionException %)
             (and (instance? java.sql.SQLException %)
                  (contains? unsent-sql-states (.getSQLState ^java.sql.SQLException %))))
        (take-while some? (iterate #(.getCause ^Throwable %) e))))

(defn- submit-tx* [node ^HttpExchange ex]
  (when-not (= "POST" (.getRequestMethod ex))
    (throw (ex-info "submit-tx takes POST" {::status 405 :error "submit-tx takes POST"})))
  (let [{:keys [tx-ops]} (if (json-body? ex) (read-json-tx-body ex) (read-body ex))]
    (when-not (vector? tx-ops)
      (throw (bad-request "body must be {:tx-ops [...]}" {})))
    (try
      (xt/submit-tx node tx-ops)
      (catch Throwable e
        (if (not-submitted? e)
          ;; no connection to the transaction log could be had: nothing of this transaction was
          ;; written, so a client may keep it and send it again (context_os's outbox does)
          (throw (ex-info "the transaction log cannot be reached: nothing was submitted"
                          {::status 503
                           :error (str "the transaction log cannot be reached: nothing was submitted ("
                                       (.getMessage e) ")")
                           :context-os/not-submitted true}))
          (throw e))))))

(defn- submit-tx [node ex _params]
  [202 (submit-tx* node ex)])

;; Endpoints of our own, under /_xtdb/context-os/: each does what a client would otherwise do
;; with two or three calls of the official API, in one round trip, with nothing new in what is
;; computed. A client must be ready for a node without them (the official server answers 404)
;; and make the official calls instead; context_os's store does.

(defn- entity-version
  "`entity-tx` and `entity` of one entity in one db (one index snapshot): the version in force
  at the basis's valid time as known at its tx, with its document under :xtdb.api/doc (nil if
  deleted or evicted); nil if the entity has no version there. Parameters as `entity-tx`."
  [node _ex params]
  (let [eid (req-eid params)]
    (with-open [db (xt/open-db node {::xt/valid-time (param params :valid-time parse-date)
                                     ::xt/tx-time (param params :tx-time parse-date)
                                     ::xt/tx-id (param params :tx-id parse-long*)})]
      [200 (some-> (xt/entity-tx db eid) (assoc ::xt/doc (xt/entity db eid)))])))

(defn- submit-and-await
  "`submit-tx`, then `await-tx` (timeout: the `timeout` parameter, ms) and `tx-committed?`: the
  submitted tx with :tx-committed?. If the node does not index it in time, a 202 with the
  submitted tx and :context-os/indexed? false (it was taken, and may still commit). A 503
  :context-os/not-submitted as `submit-tx`."
  [node ex params]
  (let [tx (submit-tx* node ex)]
    (try
      (xt/await-tx node tx (timeout-param params))
      [200 (assoc tx :tx-committed? (xt/tx-committed? node tx))]
      (catch TimeoutException _
        [202 (assoc tx :context-os/indexed? false)]))))

;; An entity's history as JSON that a client's C parser reads several times faster than EDN
;; (Python: a history of 1,000 versions, 1.6 MB, 24 ms as EDN). Only where JSON says the same:
;; documents whose keys are keywords and whose values are strings, integers, finite doubles,
;; booleans, nil, and vectors, lists and string-keyed maps of those (the set under
;; :ctxos/meta-keys as an array); anything else answers 409 and the client asks `entity` instead.

(def ^:private not-plain (Exception. "a value JSON would not keep"))

(defn- plain-json! [^StringBuilder sb x]
  (cond
    (string? x) (json-string! sb x)
    (nil? x) (.append sb "null")
    (instance? Boolean x) (.append sb (if x "true" "false"))
    (or (instance? Long x) (instance? Integer x) (instance? Short x) (instance? Byte x) (instance? BigInt x)
        (instance? BigInteger x)) (.append sb (str x))
    (instance? Double x) (if (Double/isFinite x) (.append sb (str x)) (throw not-plain))
    (map? x) (do (.append sb \{)
                 (reduce-kv (fn [first? k v]
                              (when-not (string? k) (throw not-plain))
                              (when-not first? (.append sb \,))
                              (json-string! sb k)
                              (.append sb \:)
                              (plain-json! sb v)
                              false)
                            true x)
                 (.append sb \}))
    (or (vector? x) (seq? x)) (do (.append sb \[)
                                  (reduce (fn [first? v]
                                            (when-not first? (.append sb \,))
                                            (plain-json! sb v)
                                            false)
                                          true x)
                                  (.append sb \]))
    :else (throw not-plain)))

(defn- doc-json! [^StringBuilder sb doc]
  (.append sb \{)
  (reduce-kv (fn [first? k v]
               (when-not (keyword? k) (throw not-plain))
               (when-not first? (.append sb \,))
               (json-string! sb (subs (str k) 1))
               (.append sb \:)
               (if (and (= k :ctxos/meta-keys) (set? v) (every? string? v))
                 (plain-json! sb (vec v))
                 (plain-json! sb v))
               false)
             true doc)
  (.append sb \}))

(defrecord ^:private Encoded [fmt ^bytes bytes])

(def ^:private ^:const gregorian-from
  "1582-10-15T00:00:00Z in epoch ms: a Date's calendar from then on is the proleptic Gregorian one."
  -12219292800000)

(defn- inst-ms
  "The epoch ms of the instant `d` is as an #inst (what every other answer writes, and what a
  client wrote): `.getTime` from 1582-10-15 on. Before it clojure.instant reads and prints a Date
  in the Julian calendar, so the Date a client's #inst \"0001-01-01T00:00:00.000Z\" became is two
  days before the instant it names (`.getTime` gave the history of such a version a valid time
  no other read gave it: two days off in year 1, ten in 1582)."
  ^long [^Date d]
  (let [t (.getTime d)]
    (if (>= t gregorian-from)
      t
      (let [c (doto (GregorianCalendar. (SimpleTimeZone. 0 "UTC")) (.setTime d))
            year (.get c Calendar/YEAR)]
        (-> (LocalDateTime/of (int (if (= (.get c Calendar/ERA) GregorianCalendar/BC) (- 1 year) year))
                              (int (inc (.get c Calendar/MONTH))) (int (.get c Calendar/DAY_OF_MONTH))
                              (int (.get c Calendar/HOUR_OF_DAY)) (int (.get c Calendar/MINUTE))
                              (int (.get c Calendar/SECOND)) (int (* 1000000 (.get c Calendar/MILLISECOND))))
            (.toInstant ZoneOffset/UTC)
            (.toEpochMilli))))))

(defn- entity-history-json
  "`entity` with history=true (the same parameters), as JSON: an array of
  [tx-time ms, tx-id, valid-time ms, content hash (hex), document or null]; 409 when a document
  holds a value JSON would not keep."
  [node ex params]
  (let [[status history] (entity node ex (assoc params :history "true"))
        sb (StringBuilder.)]
    (try
      (.append sb \[)
      (reduce (fn [first? e]
                (when-not first? (.append sb \,))
                (-> sb
                    (.append \[) (.append (inst-ms (::xt/tx-time e)))
                    (.append \,) (.append (long (::xt/tx-id e)))
                    (.append \,) (.append (inst-ms (::xt/valid-time e)))
                    (.append ",\"") (.append (str (::xt/content-hash e))) (.append "\","))
                (if-let [doc (::xt/doc e)]
                  (doc-json! sb doc)
                  (.append sb "null"))
                (.append sb \])
                false)
              true history)
      (.append sb \])
      [status (->Encoded :json (.getBytes (str sb) StandardCharsets/UTF_8))]
      (catch Exception e
        (if (identical? e not-plain)
          [409 {:error "a document holds a value JSON would not keep: ask entity"}]
          (throw e))))))

(defn- latest-tx
  "`latest-completed-tx`, then `tx-committed?` of it: the latest indexed tx with
  :tx-committed?, or nil when the node has indexed none (a 200: this endpoint's 404 means a node
  without it)."
  [node _ex _params]
  [200 (some-> (xt/latest-completed-tx node) (as-> tx (assoc tx :tx-committed? (xt/tx-committed? node tx))))])

(defn- await-tx [node _ex params]
  (let [tx-id (or (param params :tx-id parse-long*) (throw (bad-request "tx-id is required" {})))]
    [200 (xt/await-tx node {::xt/tx-id tx-id} (timeout-param params))]))

(defn- await-tx-time [node _ex params]
  (let [tx-time (or (param params :tx-time parse-date) (throw (bad-request "tx-time is required" {})))]
    [200 {::xt/tx-time (xt/await-tx-time node tx-time (timeout-param params))}]))

(defn- sync*
  "`sync`, or with `tx-time` `await-tx-time`, as the official server's /_xtdb/sync."
  [node _ex params]
  (let [timeout (timeout-param params)]
    [200 {::xt/tx-time (if-let [tx-time (param params :tx-time parse-date)]
                         (xt/await-tx-time node tx-time timeout)
                         (xt/sync node timeout))}]))

(defn- tx-committed [node _ex params]
  (let [tx-id (or (param params :tx-id parse-long*) (throw (bad-request "tx-id is required" {})))]
    [200 {:tx-committed? (xt/tx-committed? node {::xt/tx-id tx-id})}]))

(defn- latest-completed-tx [node _ex _params]
  (if-let [tx (xt/latest-completed-tx node)]
    [200 tx]
    [404 {:error "No latest-completed-tx found."}]))

(defn- latest-submitted-tx [node _ex _params]
  (if-let [tx (xt/latest-submitted-tx node)]
    [200 tx]
    [404 {:error "No latest-submitted-tx found."}]))

(defn- attribute-stats [node _ex _params]
  [200 (xt/attribute-stats node)])

(defn- tx-log [node _ex params]
  (let [after-tx-id (param params :after-tx-id parse-long*)
        with-ops? (boolean (param params :with-ops? parse-bool))]
    (with-open [txs (xt/open-tx-log node after-tx-id with-ops?)]
      [200 (or (seq (doall (iterator-seq txs))) '())])))

(defn- active-queries [node _ex _params]
  [200 (xt/active-queries node)])

(defn- recent-queries [node _ex _params]
  [200 (xt/recent-queries node)])

(defn- slowest-queries [node _ex _params]
  [200 (xt/slowest-queries node)])

;; How each endpoint's body (answer or error) is shaped before it is written as JSON, as the
;; official server's encoder for that endpoint does it.

(defn- entity-json [body]
  ;; a document (or an error) as it is; a history's entries camelCased
  (if (map? body) body (map camel-case-keys body)))

(defn- tx-log-entry-json [tx]
  (let [op-names (fn [ops] (mapv #(update % 0 name) ops))]
    (cond-> tx
      (contains? tx ::xt/tx-ops) (update ::xt/tx-ops op-names)
      (contains? tx ::xt/tx-events) (update ::xt/tx-events op-names)
      true (camel-case-keys))))

(defn- tx-log-json [body]
  (if (map? body) (tx-log-entry-json body) (map tx-log-entry-json body)))

(defn- query-states-json [body]
  ;; each query as its EDN text
  (if (map? body)
    (camel-case-keys body)
    (map #(camel-case-keys (update % :query pr-str)) body)))

(def ^:private routes
  "path -> [endpoint, what its body goes through before it is written as JSON]"
  {"/_xtdb/status" [status camel-case-keys]
   "/_xtdb/db" [db-basis camel-case-keys]
   "/_xtdb/entity" [entity entity-json]
   "/_xtdb/entity-tx" [entity-tx camel-case-keys]
   "/_xtdb/query" [query identity]
   "/_xtdb/submit-tx" [submit-tx camel-case-keys]
   "/_xtdb/await-tx" [await-tx camel-case-keys]
   "/_xtdb/await-tx-time" [await-tx-time camel-case-keys]
   "/_xtdb/sync" [sync* camel-case-keys]
   "/_xtdb/tx-committed" [tx-committed camel-case-keys]
   "/_xtdb/latest-completed-tx" [latest-completed-tx camel-case-keys]
   "/_xtdb/latest-submitted-tx" [latest-submitted-tx camel-case-keys]
   "/_xtdb/attribute-stats" [attribute-stats identity]
   "/_xtdb/tx-log" [tx-log tx-log-json]
   "/_xtdb/active-queries" [active-queries query-states-json]
   "/_xtdb/recent-queries" [recent-queries query-states-json]
   "/_xtdb/slowest-queries" [slowest-queries query-states-json]
   "/_xtdb/context-os/entity-version" [entity-version camel-case-keys]
   "/_xtdb/context-os/submit-tx" [submit-and-await camel-case-keys]
   "/_xtdb/context-os/latest-tx" [latest-tx camel-case-keys]
   "/_xtdb/context-os/entity-history" [entity-history-json camel-case-keys]})

;; ---------------------------------------------------------------------------------------------
;; Responses

;; EDN is written by our own printer, not `pr-str`: Clojure's printer goes through a multimethod
;; per value and a map lookup per character of every string, so a 1.6 MB history (1,000
;; documents) took 54 ms to print, against 5 ms to read from the indexes. The text is the same
;; byte for byte: a value is printed here only when `print-method` would print it with one of
;; the methods below (looked up by print-method's own dispatch: a keyword :type in the metadata, else the class), in the same way; anything else
;; (a symbol, a BigInt, ##NaN, a record, a value with :type metadata...) goes to `print-method`
;; itself. tests/store/test_xtdb_front_end_edn.py checks it against `pr-str`.

(defn- method-of [dispatch-val] (.getMethod ^MultiFn print-method dispatch-val))

(def ^:private ^java.util.IdentityHashMap print-kinds
  "The printer's methods this namespace reproduces, as loaded, to what they print (a method
  redefined later is not one of them, so its values go to `print-method`)."
  (doto (java.util.IdentityHashMap.)
    (.put (method-of clojure.lang.IPersistentMap) :map)
    (.put (method-of clojure.lang.IPersistentVector) :vector)
    (.put (method-of clojure.lang.IPersistentSet) :set)
    (.put (method-of clojure.lang.ISeq) :seq)
    (.put (method-of String) :string)
    (.put (method-of Keyword) :keyword)
    (.put (method-of Number) :number)
    (.put (method-of Double) :double)
    (.put (method-of Boolean) :boolean)
    (.put (method-of Date) :date)
    (.put (method-of Id) :id)))

(def ^:private ^ThreadLocal edn-date-format
  ;; clojure.instant's printer of a java.util.Date: milliseconds, UTC written as -00:00
  (ThreadLocal/withInitial
   (reify Supplier
     (get [_] (doto (SimpleDateFormat. "yyyy-MM-dd'T'HH:mm:ss.SSS-00:00")
                (.setTimeZone (java.util.TimeZone/getTimeZone "GMT")))))))

(defn- edn-string! [^StringBuilder sb ^String s]
  ;; runs of characters that need no escape are appended whole
  (.append sb \")
  (let [n (.length s)]
    (loop [start 0 i 0]
      (if (< i n)
        (let [e (case (.charAt s i)
                  \newline "\\n"
                  \tab "\\t"
                  \return "\\r"
                  \" "\\\""
                  \\ "\\\\"
                  \formfeed "\\f"
                  \backspace "\\b"
                  nil)]
          (if e
            (do (.append sb s start i)
                (.append sb ^String e)
                (recur (inc i) (inc i)))
            (recur start (inc i))))
        (.append sb s start n))))
  (.append sb \"))

(declare write-edn!)

(defn- edn-seq! [^StringBuilder sb ^String begin ^String sep ^String end xs]
  (.append sb begin)
  (loop [xs (seq xs) first? true]
    (when xs
      (when-not first? (.append sb sep))
      (write-edn! sb (first xs))
      (recur (next xs) false)))
  (.append sb end))

(defn- write-edn! [^StringBuilder sb x]
  (if (nil? x)
    (.append sb "nil")
    (let [t (get (meta x) :type)
          ;; print-method's own dispatch: a keyword :type in the metadata, else the class
          kind (.get print-kinds (method-of (if (keyword? t) t (class x))))]
      (case kind
        :string (edn-string! sb x)
        (:keyword :number :boolean) (.append sb (str x))
        :double (if (Double/isFinite (double x))
                  (.append sb (str x))
                  (.append sb (pr-str x)))
        :map (do (.append sb \{)
                 (loop [es (seq x) first? true]
                   (when es
                     (let [^java.util.Map$Entry e (first es)]
                       (when-not first? (.append sb ", "))
                       (write-edn! sb (.getKey e))
                       (.append sb \space)
                       (write-edn! sb (.getValue e))
                       (recur (next es) false))))
                 (.append sb \}))
        :vector (edn-seq! sb "[" " " "]" x)
        :seq (edn-seq! sb "(" " " ")" x)
        :set (edn-seq! sb "#{" " " "}" x)
        :date (-> sb
                  (.append "#inst \"")
                  (.append (.format ^SimpleDateFormat (.get edn-date-format) ^Date x))
                  (.append "\""))
        :id (do (.append sb "#xtdb/id ")
                (edn-string! sb (str x)))
        (.append sb (pr-str x))))))

(defn- ->edn ^String [body]
  (binding [*print-length* nil
            *print-level* nil
            *print-namespace-maps* false
            *print-meta* false]
    (let [sb (StringBuilder.)]
      (write-edn! sb body)
      (str sb))))

(defn- encode ^bytes [fmt json-shape body]
  (.getBytes (case fmt
               :json (->json (json-shape body))
               :edn (->edn body))
             StandardCharsets/UTF_8))

(def ^:private content-types
  {:edn "application/edn; charset=utf-8"
   :json "application/json; charset=utf-8"})

(defn- respond [^HttpExchange ex fmt status ^bytes bytes]
  (.set (.getResponseHeaders ex) "Content-Type" (content-types fmt))
  (.sendResponseHeaders ex status (alength bytes))
  (with-open [out (.getResponseBody ex)]
    (.write out bytes)))

(defn- error-response
  "Status and body for an exception, following the official server: xtdb's own illegal-argument
  and out-of-sync errors are 400s carrying their ex-data; anything else is a 500."
  [^Throwable e]
  (let [data (ex-data e)]
    (cond
      (::status data) [(::status data) (dissoc data ::status)]
      (or (instance? xtdb.IllegalArgumentException e)
          (instance? xtdb.api.NodeOutOfSyncException e)) [400 data]
      (instance? TimeoutException e) [500 {:type "exception"
                                           :class (.getName (class e))
                                           :error (or (.getMessage e) "timed out")}]
      :else [500 {:type "exception"
                  :class (.getName (class e))
                  :error (str (.getMessage e))}])))

(defn- handler ^HttpHandler [node]
  (reify HttpHandler
    (handle [_ ex]
      (try
        (let [path (.getPath (.getRequestURI ex))
              [endpoint json-shape] (get routes path [nil camel-case-keys])
              fmt (response-format ex)
              failed (fn [^Throwable e]
                       (let [[status _ :as resp] (error-response e)]
                         (when (>= status 500)
                           (log/warn e "request failed:" (.getRequestMethod ex) path))
                         resp))
              [status body] (try
                              (if endpoint
                                (endpoint node ex (query-params ex))
                                [404 {:error (str "no such endpoint: " path)}])
                              (catch Throwable e
                                (failed e)))
              [fmt status bytes] (if (instance? Encoded body)
                                   [(:fmt body) status (:bytes body)]
                                   (try
                                     [fmt status (encode fmt json-shape body)]
                                     (catch Throwable e
                                       (let [[status body] (failed e)]
                                         [fmt status (encode fmt camel-case-keys body)]))))]
          (respond ex fmt status bytes))
        (catch Throwable e
          (log/error e "could not send the response"))
        (finally
          (.close ex))))))

;; ---------------------------------------------------------------------------------------------
;; Module

(defrecord HttpFrontEnd [^HttpServer server ^ExecutorService executor]
  Closeable
  (close [_]
    (.stop server 0)
    (.shutdownNow executor)))

(defn- daemon-threads ^ThreadFactory []
  (let [n (AtomicLong.)]
    (reify ThreadFactory
      (newThread [_ r]
        (doto (Thread. ^Runnable r (str "context-os-xtdb-http-" (.incrementAndGet n)))
          (.setDaemon true))))))

(defn ->server
  {::sys/deps {:xtdb-node :xtdb/node}
   ::sys/args {:port {:spec ::sys/nat-int
                      :doc "Port to serve the XTDB REST API on"
                      :default 3000}
               :host {:spec ::sys/string
                      :doc "Address to bind (loopback by default)"
                      :default "127.0.0.1"}}}
  [{:keys [xtdb-node port host]}]
  ;; Without TCP_NODELAY, the JDK server's separate header and body writes meet the client's
  ;; delayed ACK: every keep-alive request then takes ~40 ms. Read once, when the server
  ;; implementation first loads, so it is set before the first HttpServer is created.
  (System/setProperty "sun.net.httpserver.nodelay" "true")
  (let [executor (Executors/newCachedThreadPool (daemon-threads))
        server (doto (HttpServer/create (InetSocketAddress. ^String host (int port)) 128)
                 (.createContext "/" (handler xtdb-node))
                 (.setExecutor executor)
                 (.start))]
    (log/info "XTDB REST API (context_os front end) listening on" (str "http://" host ":" port))
    (->HttpFrontEnd server executor)))
