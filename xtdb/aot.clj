;; Compiles a node's Clojure ahead of time, once per classpath (xtdb/start runs it).
;;
;;   java -Dclojure.compile.path=OUT -cp OUT:xtdb/src:CLASSPATH clojure.main xtdb/aot.clj OUT DATA-DIR
;;
;; XTDB 1.x's jars ship Clojure source, so a node compiles every namespace it loads each time it
;; starts (15-45 s on two cores). This loads what a node loads with *compile-files* on, writing
;; each namespace's classes into OUT: xtdb.main and the front end, then a RocksDB node started in
;; DATA-DIR (its front end on a port of the system's choosing) and closed again, which loads the
;; modules a node resolves from its config; on a cluster node's classpath, the JDBC modules too.
;; A namespace loaded only later in a node's life (a module of another config) still loads from
;; its source there: compiled or not, it is the same code.

(require '[clojure.java.io :as io])

(let [[out data-dir] *command-line-args*
      on-classpath? (fn [path] (some? (io/resource path)))]
  (binding [*compile-path* out
            *compile-files* true]
    (require 'xtdb.main 'xtdb.api 'context-os.xtdb-http 'context-os.edn-reader)
    (when (on-classpath? "xtdb/jdbc.clj")
      (require 'xtdb.jdbc 'xtdb.jdbc.psql 'context-os.xtdb-tx-log))
    (let [kv (fn [dir] {:kv-store {:xtdb/module 'xtdb.rocksdb/->kv-store
                                   :db-dir (str (io/file data-dir dir))}})
          start-node (requiring-resolve 'xtdb.api/start-node)
          sync-node (requiring-resolve 'xtdb.api/sync)]
      (with-open [^java.io.Closeable node (start-node {:xtdb/tx-log (kv "tx-log")
                                                        :xtdb/document-store (kv "docs")
                                                        :xtdb/index-store (kv "indexes")
                                                        :context-os.xtdb-http/server {:port 0
                                                                                      :host "127.0.0.1"}})]
        (sync-node node)))))
(shutdown-agents)
