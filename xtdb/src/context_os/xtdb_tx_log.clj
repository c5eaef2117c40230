(ns context-os.xtdb-tx-log
  "A cluster node's transaction log: xtdb-jdbc's, whose subscription (the loop that feeds the
  node's indexer) is woken at once by the node's own submits and otherwise polls the database
  every `:poll-sleep-ms`.

  Why: xtdb-jdbc 1.24's log polls PostgreSQL and, when nothing is new, sleeps a fixed 100 ms
  before looking again. A transaction submitted while it sleeps is indexed only when it wakes, so
  a client that submits and awaits (every context_os turn) waited 50 ms on average, and a node
  took about 10 awaited transactions a second whatever its hardware. Here a submit through this
  node releases the sleeper at once; a transaction submitted through another node is seen within
  `:poll-sleep-ms` (default 10).

  A read of the log that fails (PostgreSQL out of reach) is tried again, later each time up to
  2 s; the node's fetches of a transaction's documents back off to 2 s too (xtdb's default grows
  to 60 s), so a node is indexing again within about 2 s of the database coming back.

  What it must never do: change what is logged or in which order. Submits, the log's cursor and
  the latest submitted transaction are xtdb-jdbc's own; only the subscription's wait is ours.

  Used in place of `xtdb.jdbc/->tx-log`:
  `{:xtdb/tx-log {:xtdb/module context-os.xtdb-tx-log/->tx-log
                  :connection-pool :xtdb.jdbc/connection-pool :poll-sleep-ms 10}}`."
  (:require [clojure.tools.logging :as log]
            [xtdb.api :as xt]
            [xtdb.db :as db]
            [xtdb.document-store :as document-store]
            [xtdb.io :as xio]
            [xtdb.jdbc :as jdbc]
            [xtdb.system :as sys]
            [xtdb.tx.subscribe :as tx-sub])
  (:import [java.io Closeable]
           [java.util.concurrent CompletableFuture Semaphore TimeUnit]
           [xtdb.api ICursor]))

(def ^:private batch-size 50)

(def ^:private max-backoff-ms 2000)

(defn- feed
  "Hands the transactions after `after-tx-id` to `f` in batches. Returns the last tx id handed
  (`after-tx-id` when there was nothing new), with `:failed` true when reading the log failed
  part way: opening it, reading a row, or closing it (xtdb-jdbc's cursor rolls back its connection
  on close, which throws when PostgreSQL went away under it). A failure of `f` itself (the node's
  indexer) is not a read failure: it ends the subscription, as in xtdb's own loop."
  [tx-log after-tx-id f ^CompletableFuture fut]
  (let [!handed (volatile! after-tx-id)
        !refused (volatile! nil)]
    (try
      (with-open [^ICursor cursor (db/open-tx-log tx-log after-tx-id {})]
        (loop [batches (partition-all batch-size (iterator-seq cursor))]
          (when-let [[txs] (and (not (.isDone fut)) (not (Thread/interrupted)) (seq batches))]
            (try
              (f fut txs)
              (catch Throwable t
                (vreset! !refused t)
                (throw t)))
            (vreset! !handed (::xt/tx-id (last txs)))
            (recur (rest batches)))))
      {:after @!handed, :failed false}
      (catch InterruptedException e (throw e))
      (catch Exception e
        ;; the subscriber's failure wins over the cursor's close failing after it
        (when-let [refused @!refused] (throw refused))
        (log/debug e "reading the transaction log failed")
        {:after @!handed, :failed true}))))

(defn- subscribe-waking [tx-log ^Semaphore wake poll-ms after-tx-id f]
  (tx-sub/completable-thread
   (fn [^CompletableFuture fut]
     (loop [after after-tx-id, backoff 0]
       (let [{got :after, failed :failed} (feed tx-log after f fut)]
         (when-not (.isDone fut)
           (cond
             ;; the database went out of reach: read again from what was handed, later each
             ;; time (up to 2 s), said once per outage
             failed
             (let [wait (min max-backoff-ms (max (* 2 backoff) poll-ms))]
               (when (zero? backoff)
                 (log/warn "reading the transaction log failed; reading it again, at most every" max-backoff-ms "ms"))
               (Thread/sleep (long wait))
               (recur got wait))

             ;; nothing new: wait for a submit through this node, or the next poll
             (= got after)
             (do (.tryAcquire wake poll-ms TimeUnit/MILLISECONDS)
                 (.drainPermits wake)
                 (recur after 0))

             :else (recur got 0))))))))

(defrecord WakingTxLog [inner ^Semaphore wake poll-ms]
  db/TxLog
  (submit-tx [this tx-events] (db/submit-tx this tx-events {}))
  (submit-tx [_ tx-events opts]
    ;; xtdb-jdbc commits the insert before it returns: the transaction is in the log now
    (let [submitted (db/submit-tx inner tx-events opts)]
      (.release wake)
      submitted))
  (open-tx-log [_ after-tx-id opts] (db/open-tx-log inner after-tx-id opts))
  (latest-submitted-tx [_] (db/latest-submitted-tx inner))
  (subscribe [_ after-tx-id f] (subscribe-waking inner wake poll-ms after-tx-id f))

  Closeable
  (close [_] (xio/try-close inner)))

(defn cap-document-fetch-backoff!
  "The indexer fetches a transaction's documents with `xio/exp-backoff` while the store fails:
  50 ms doubling up to xtdb's default of 60 s, so a node that was fetching when PostgreSQL went
  away for a minute could wait another minute after it came back, every awaited submit through
  it timing out meanwhile. Caps that wait at the log's own 2 s."
  []
  (alter-var-root #'document-store/*exp-backoff-opts* #(merge {:max-wait-ms max-backoff-ms} %)))

(defn ->tx-log {::sys/args {:fetch-size {:default 1024, :spec ::sys/pos-int}
                            :poll-sleep-ms {:doc "How long the subscription waits for a submit through this node before it reads the log again"
                                            :default 10
                                            :spec ::sys/pos-int}}
                ::sys/deps {:connection-pool `jdbc/->connection-pool}}
  [{:keys [poll-sleep-ms] :as opts}]
  (cap-document-fetch-backoff!)
  (->WakingTxLog (jdbc/->tx-log opts) (Semaphore. 0) poll-sleep-ms))
