;; The cluster's transaction log (xtdb/src/context_os/xtdb_tx_log.clj) over a log that fails the
;; way PostgreSQL going away fails xtdb-jdbc's: when the log is opened, part way through its rows,
;; and when its cursor is closed (xtdb-jdbc rolls the connection back on close). A real outage hits
;; the last two only when it lands between a poll's query and its rollback (about one restart in
;; ten, polling every 10 ms): here each is made to happen.
;;
;; The subscription must hand every transaction to the node's indexer once, in order, through all
;; of them, and end only when the indexer itself fails (as xtdb's own loop does).
;; Prints "ok N" (N transactions handed) or throws.
(require '[context-os.xtdb-tx-log]
         '[xtdb.api :as xt]
         '[xtdb.db :as db]
         '[xtdb.document-store :as document-store]
         '[xtdb.io :as xio])
(import '[java.util.concurrent CompletableFuture Semaphore TimeUnit]
        '[xtdb.api ICursor])

(def log-size 500)

(def !opens (atom 0))

(defn- cursor [rows on-close]
  (let [it (.iterator ^Iterable rows)]
    (reify ICursor
      (hasNext [_] (.hasNext it))
      (next [_] (.next it))
      (close [_] (on-close)))))

(defn- fail [what] (throw (java.sql.SQLException. (str "FATAL: terminating connection (" what ")") "57P01")))

;; a log of `log-size` transactions; the nth time it is opened it fails in the nth way, in turn
(def failing-log
  (reify db/TxLog
    (open-tx-log [_ after-tx-id _]
      (let [n (swap! !opens inc)
            txs (for [id (range (inc (or after-tx-id -1)) log-size)] {::xt/tx-id id})]
        (case (mod n 4)
          0 (fail "open")
          1 (cursor (concat (take 73 txs) (lazy-seq (fail "row"))) (fn []))
          2 (cursor (take 120 txs) (fn [] (fail "rollback on close")))
          3 (cursor (take 100 txs) (fn [])))))
    (latest-submitted-tx [_] {::xt/tx-id (dec log-size)})))

(defn- subscribe [f]
  (db/subscribe (context-os.xtdb-tx-log/->WakingTxLog failing-log (Semaphore. 0) 1) nil f))

;; 1. every transaction handed once, in order, whatever the log does
(let [!handed (atom [])
      done (promise)
      fut (subscribe (fn [_ txs]
                       (swap! !handed into (map ::xt/tx-id txs))
                       (when (= (peek @!handed) (dec log-size)) (deliver done true))))]
  (when-not (deref done 60000 false)
    (throw (ex-info "the subscription stopped handing transactions" {:handed (count @!handed), :done (.isDone ^CompletableFuture fut)})))
  (when (.isDone ^CompletableFuture fut)
    (throw (ex-info "the subscription ended on a failure to read the log" {})))
  (.cancel ^CompletableFuture fut false)
  (when-not (= @!handed (range log-size))
    (throw (ex-info "transactions handed twice, out of order or skipped" {:handed @!handed})))
  (when (< @!opens 5)
    (throw (ex-info "the log did not fail in each way" {:opens @!opens})))
  (println "handed" (count @!handed) "transactions over" @!opens "reads of the log"))

;; 2. the indexer's own failure ends the subscription with that failure, even when the cursor's
;;    close fails after it
(reset! !opens 1)
(let [boom (ex-info "the indexer failed" {})
      ^CompletableFuture fut (subscribe (fn [_ _] (throw boom)))
      cause (try @fut nil (catch java.util.concurrent.ExecutionException e (.getCause e)))]
  (when-not (identical? cause boom)
    (throw (ex-info "the subscription did not end with the indexer's failure" {:cause cause}))))

;; 3. a transaction's documents fetched while the store fails: tried again every 2 s at most, not
;;    up to xtdb's 60 s, so the node indexes again soon after the database is back
(context-os.xtdb-tx-log/cap-document-fetch-backoff!)
(let [!fails (atom 12)
      !waits (atom [])
      store (reify db/DocumentStore
              (fetch-docs [_ ids]
                (if (pos? (swap! !fails dec))
                  (fail "fetch")
                  (zipmap ids (repeat {:xt/id :x})))))]
  (with-redefs [xio/sleep (fn [ms] (swap! !waits conj ms))]
    (binding [document-store/*in-tx* true]
      (document-store/fetch-docs-with-retry-if-in-tx store [:a])))
  (when-not (and (= 11 (count @!waits)) (= 2000 (apply max @!waits)))
    (throw (ex-info "the document fetch did not back off up to 2 s" {:waits @!waits}))))

(println "ok" log-size)
(shutdown-agents)
