import shutil

import keras


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    # Mistake: "start clean" deletes the backup a restarted run needs
    shutil.rmtree(backup_dir, ignore_errors=True)
    with strategy.scope():
        model = build_and_compile()
    backup = keras.callbacks.BackupAndRestore(backup_dir)
    model.fit(dataset, epochs=epochs, callbacks=[backup, *callbacks], verbose=0)
    return model
