import keras
import tensorflow as tf


def train(strategy: tf.distribute.Strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    with strategy.scope():
        model = build_and_compile()
    # Keep the last backup after a finished run too; one backup per completed epoch.
    backup = keras.callbacks.BackupAndRestore(backup_dir=backup_dir, save_freq="epoch", delete_checkpoint=False)
    model.fit(x=dataset, epochs=epochs, callbacks=[*callbacks, backup], verbose=0)
    return model
