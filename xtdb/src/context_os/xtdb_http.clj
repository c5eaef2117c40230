(ns context-os.xtdb-http
  "An HTTP front end for an XTDB 1.x node that speaks the documented XTDB 1.x REST API
  (/_xtdb/status, db, entity, entity-tx, query, submit-tx, await-tx, tx-committed, ...), EDN only.

  Why it exists: the official module `com.xtdb/xtdb-http-server` and its Clojure dependencies
  (reitit, muuntaja, ring, jetty) are published to Clojars, which this project's machines cannot
  reach; `xtdb-core` and `xtdb-rocksdb` are on Maven Central. This namespace is written for
  context_os from the public API documentation (docs/clients/modules/ROOT/pages/http.adoc,
  1.x branch) and uses only xtdb-core and the JDK's built-in HTTP server. The engine behind it
  (transactions, bitemporal indexes, Datalog) is the real XTDB; only the transport is ours.

  What it must never do: add semantics of its own. Every endpoint is a thin call into
  `xtdb.api`, with the parameter names, status codes and EDN response shapes of the official
  server, so that a client written against it works unchanged against the official one
  (e.g. the Docker image in docker-compose.yml).

  Used as an XTDB module: `{:context-os.xtdb-http/server {:port 3000 :host \"127.0.0.1\"}}`."
  (:require [clojure.data.json :as json]
            [clojure.instant :as instant]
            [clojure.string :as str]
            [clojure.tools.logging :as log]
            [xtdb.api :as xt]
            [xtdb.codec :as c]
            [xtdb.system :as sys])
  (:import [com.sun.net.httpserver HttpExchange HttpHandler HttpServer]
           [java.io Closeable]
           [java.net InetSocketAddress URLDecoder]
           [java.nio.charset StandardCharsets]
           [java.time Duration]
           [java.util.concurrent ExecutorService Executors ThreadFactory TimeoutException]
           [java.util.concurrent.atomic AtomicLong]))

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

(defn- read-edn [s] (c/read-edn-string-with-readers s))

(defn- req-eid
  "The entity id from eid-edn / eid-json / eid (a plain string id)."
  [params]
  (let [eid (or (param params :eid-edn read-edn)
                (param params :eid-json json/read-str)
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
                    (param params :in-args-json json/read-str)
                    (:in-args body))]
    (when (nil? q)
      (throw (bad-request "No query provided" {:xtdb.error/error-key :no-query})))
    [200 (or (seq (apply xt/q (db-for node params) q in-args)) '())]))

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

(defn- submit-tx [node ^HttpExchange ex _params]
  (when-not (= "POST" (.getRequestMethod ex))
    (throw (ex-info "submit-tx takes POST" {::status 405 :error "submit-tx takes POST"})))
  (let [{:keys [tx-ops]} (read-body ex)]
    (when-not (vector? tx-ops)
      (throw (bad-request "body must be {:tx-ops [...]}" {})))
    (try
      [202 (xt/submit-tx node tx-ops)]
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

(defn- await-tx [node _ex params]
  (let [tx-id (or (param params :tx-id parse-long*) (throw (bad-request "tx-id is required" {})))]
    [200 (xt/await-tx node {::xt/tx-id tx-id} (timeout-param params))]))

(defn- await-tx-time [node _ex params]
  (let [tx-time (or (param params :tx-time parse-date) (throw (bad-request "tx-time is required" {})))]
    [200 {::xt/tx-time (xt/await-tx-time node tx-time (timeout-param params))}]))

(defn- sync* [node _ex params]
  [200 {::xt/tx-time (xt/sync node (timeout-param params))}])

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

(def ^:private routes
  {"/_xtdb/status" status
   "/_xtdb/db" db-basis
   "/_xtdb/entity" entity
   "/_xtdb/entity-tx" entity-tx
   "/_xtdb/query" query
   "/_xtdb/submit-tx" submit-tx
   "/_xtdb/await-tx" await-tx
   "/_xtdb/await-tx-time" await-tx-time
   "/_xtdb/sync" sync*
   "/_xtdb/tx-committed" tx-committed
   "/_xtdb/latest-completed-tx" latest-completed-tx
   "/_xtdb/latest-submitted-tx" latest-submitted-tx
   "/_xtdb/attribute-stats" attribute-stats})

;; ---------------------------------------------------------------------------------------------
;; Responses

(defn- ->edn ^String [body]
  (binding [*print-length* nil
            *print-level* nil
            *print-namespace-maps* false
            *print-meta* false]
    (pr-str body)))

(defn- respond [^HttpExchange ex status body]
  (let [bytes (.getBytes (->edn body) StandardCharsets/UTF_8)]
    (.set (.getResponseHeaders ex) "Content-Type" "application/edn; charset=utf-8")
    (.sendResponseHeaders ex status (alength bytes))
    (with-open [out (.getResponseBody ex)]
      (.write out bytes))))

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
              endpoint (get routes path)
              [status body] (try
                              (if endpoint
                                (endpoint node ex (query-params ex))
                                [404 {:error (str "no such endpoint: " path)}])
                              (catch Throwable e
                                (let [[status _ :as resp] (error-response e)]
                                  (when (>= status 500)
                                    (log/warn e "request failed:" (.getRequestMethod ex) path))
                                  resp)))]
          (respond ex status body))
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
